"""Overlaps, replacements and the keyed hash.

Every detector of the configured types searches the same input text; where
matches overlap, the one of the type earlier in :data:`PRIORITY` wins (then
the earlier start, then the longer): a secret (a key block holds digit runs
and ``@``) before an e-mail (``+86...@qq.com`` local parts), a resident ID
(checksum, 18 digits) before a bank card (Luhn, 16-19 digits; a Gansu ID
starts with 62, UnionPay's prefix), both before a phone number (11-12 digits)
and an IP address last. The losers are dropped whole, never cut.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

from stages.pii.found import Found

#: Types, highest priority first.
PRIORITY = ("secret", "email", "cn_resident_id", "bank_card", "phone", "ip")
#: Placeholder per type (``replacement: placeholder``); ``<NAME:hash>`` in hash mode.
PLACEHOLDERS = {"email": "EMAIL", "phone": "PHONE", "cn_resident_id": "CN_ID", "bank_card": "BANK_CARD",
                "ip": "IP_ADDRESS", "secret": "SECRET"}
HASH_HEX = 8   # 32-bit tokens: ~1 collision per 2**16 distinct values of a type (birthday bound)


def resolve(found: dict[str, list[Found]]) -> list[tuple[str, Found]]:
    """The non-overlapping matches, by :data:`PRIORITY`, sorted by start.

    Args:
        found: type -> matches of that type (any order).

    Returns:
        ``[(type, Found)]`` sorted by ``start``; O(k log k) for k matches
        (accepted spans kept sorted, a new one checked against its
        neighbours).
    """
    import bisect

    starts: list[int] = []
    accepted: list[tuple[str, Found]] = []
    for kind in PRIORITY:
        for f in sorted(found.get(kind, ()), key=lambda f: (f.start, -f.end)):
            i = bisect.bisect_left(starts, f.start)
            if i > 0 and accepted[i - 1][1].end > f.start:
                continue
            if i < len(accepted) and accepted[i][1].start < f.end:
                continue
            starts.insert(i, f.start)
            accepted.insert(i, (kind, f))
    return accepted


def hasher(key: bytes) -> Callable[[str, str], str]:
    """``token(kind, value) -> "<NAME:xxxxxxxx>"``: blake2b keyed by ``key``
    (RFC 7693 keyed mode, a MAC: without the key a token cannot be checked
    against a guessed value), over ``kind`` and the canonical value, so equal
    values give equal tokens across the corpus and one value of two types two
    tokens. ``key``: at most 64 bytes."""
    def token(kind: str, value: str) -> str:
        digest = hashlib.blake2b(f"{kind}\0{value}".encode(), key=key, digest_size=HASH_HEX // 2).hexdigest()
        return f"<{PLACEHOLDERS[kind]}:{digest}>"
    return token


def placeholder(kind: str, value: str) -> str:
    """``<NAME>`` for ``kind`` (``value`` unused)."""
    return f"<{PLACEHOLDERS[kind]}>"


def apply(text: str, matches: Iterable[tuple[str, Found]],
          token: Callable[[str, str], str]) -> tuple[str, list[dict]]:
    """Replace ``matches`` (sorted, non-overlapping) in ``text``.

    Returns:
        ``(new_text, edits)``: edits as ``{"type", "start", "end",
        "replacement"}`` with ``start``/``end`` the code-point span in the
        input ``text`` (the original value is not kept).
    """
    pieces: list[str] = []
    edits: list[dict] = []
    last = 0
    for kind, f in matches:
        replacement = token(kind, f.value)
        pieces.append(text[last:f.start])
        pieces.append(replacement)
        edits.append({"type": kind, "start": f.start, "end": f.end, "replacement": replacement})
        last = f.end
    pieces.append(text[last:])
    return "".join(pieces), edits
