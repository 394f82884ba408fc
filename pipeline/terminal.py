"""Text from a corpus, shown on a terminal without being obeyed by it.

Document text, ids, file and source names come from the inputs (or an edited
manifest) and may hold terminal control sequences: ``ESC [ 2 J`` clears the
screen, ``ESC ] 52`` writes the clipboard, ``U+202E`` reverses what follows.
Every command prints such text through one of these:

* :func:`visible`: plain text with every control character made visible as
  its escape (``\\x1b``, ``\\r``, ``\\x9b``, ``\\u202e``): Unicode category
  ``Cc`` (C0, DEL, C1) except newline and tab, and the bidirectional
  formatting characters (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069);
* :func:`markup`: the same, then ``rich.markup.escape``, for strings that
  rich renders as markup (table cells, titles): ``[red]`` stays text;
* :func:`visible_json`: JSON text (``json.dumps(..., ensure_ascii=False)``)
  with the characters JSON leaves raw (DEL, C1, bidi controls) written as
  ``\\uXXXX`` escapes: still valid JSON that decodes to the same strings.
"""

from __future__ import annotations

import unicodedata

_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_KEEP = {"\n", "\t"}


def _escape(code: int) -> str:
    named = {0x0D: "\\r", 0x0B: "\\v", 0x0C: "\\f", 0x08: "\\b", 0x07: "\\a", 0x00: "\\0"}
    if code in named:
        return named[code]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_CONTROLS = [c for c in range(0x100) if unicodedata.category(chr(c)) == "Cc" and chr(c) not in _KEEP] + _BIDI
_VISIBLE = {c: _escape(c) for c in _CONTROLS}
# json.dumps already escapes U+0000..U+001F; what it leaves raw:
_JSON = {c: f"\\u{c:04x}" for c in _CONTROLS if c >= 0x7F}


def visible(text: object) -> str:
    """``str(text)`` with control and bidi-formatting characters shown as
    escapes (newline and tab kept). ``visible("a\\x1b[2Jb")`` ->
    ``'a\\\\x1b[2Jb'`` (a backslash, not ESC)."""
    return str(text).translate(_VISIBLE)


def markup(text: object) -> str:
    """:func:`visible`, then escaped for rich markup: for table cells."""
    from rich.markup import escape

    return escape(visible(text))


def visible_json(json_text: str) -> str:
    """JSON text with DEL, C1 and bidi controls as ``\\uXXXX`` escapes (the
    decoded value is unchanged)."""
    return json_text.translate(_JSON)
