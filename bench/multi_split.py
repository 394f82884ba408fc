"""The development / held-out split of ``../shared/corpus-multi`` (issue 15).

The held-out part is chosen *before* any tuning and never looked at while
tuning: every figure of the closing note and of ``make bench``'s
multilingual section is measured on it only; rules and defaults are tuned on
the development part (and on ``../shared/corpus``).

Split rule: a document's *page key* is the page it translates
(gnome-help: ``meta.page_id``; the manuals: ``source`` + ``meta.page``), so
all translations of one page fall on the same side and no held-out page has
a translation in the development part. A page is held out when the first 8
hex digits of ``sha256("mindcorpus-multi-split-v1:" + key)`` are 0 mod 3:
about one page in three.

Gold language: the record's ``lang`` comes from the locale directory, not
from a detector, and many translations are untranslated English (README,
"Known noise"). A record is *gold* (usable to score language ID) when it is
English, or when its ``meta.en_identical_frac`` is known and at most
:data:`MAX_EN_IDENTICAL` (at most 10% of its prose is an unchanged English
paragraph); ``he`` is never gold (byte-identical English throughout).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

SPLIT_SALT = "mindcorpus-multi-split-v1:"
HELD_OUT_MOD = 3
MAX_EN_IDENTICAL = 0.10
FILES = ("multi-gnome-help", "multi-manuals")
MULTI = Path(__file__).resolve().parents[2] / "shared" / "corpus-multi"
# Serbian in Latin script and Croatian/Bosnian are one language to lid.176
# (it has no way to tell sr-Latn from hr); a Serbian record labelled any of
# these counts as right, for the bare model and the stage alike.
ACCEPTED = {"sr": {"sr", "hr", "bs", "sh"}}


def page_key(rec: dict) -> str:
    """The page a record translates (same for all its languages)."""
    meta = rec.get("meta") or {}
    if rec["source"] == "gnome-help":
        return "gnome-help:" + str(meta.get("page_id"))
    return f"{rec['source']}:{meta.get('page')}"


def held_out(rec: dict) -> bool:
    """True for a record of the held-out part."""
    digest = hashlib.sha256((SPLIT_SALT + page_key(rec)).encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % HELD_OUT_MOD == 0


def gold(rec: dict) -> str | None:
    """The record's language when it can score language ID, else None."""
    lang = rec.get("lang")
    if lang == "he" or not lang:
        return None
    if lang == "en":
        return "en"
    frac = (rec.get("meta") or {}).get("en_identical_frac")
    if frac is None or frac > MAX_EN_IDENTICAL:
        return None
    return lang


def correct(predicted: str | None, gold_lang: str) -> bool:
    """Whether ``predicted`` is right for a record of ``gold_lang``."""
    return predicted is not None and predicted in ACCEPTED.get(gold_lang, {gold_lang})


def records(part: str, multi: Path = MULTI) -> Iterator[dict]:
    """The records of ``part`` (``"dev"`` or ``"heldout"``), file by file,
    each with ``file`` (the file stem) added.

    Raises:
        ValueError: ``part`` is neither.
        FileNotFoundError: ``multi`` lacks a file.
    """
    import zstandard

    if part not in ("dev", "heldout"):
        raise ValueError(f"part is 'dev' or 'heldout', not {part!r}")
    want = part == "heldout"
    for stem in FILES:
        with open(multi / f"{stem}.jsonl.zst", "rb") as fh:
            reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
            for line in reader:
                rec = json.loads(line)
                if held_out(rec) == want:
                    rec["file"] = stem
                    yield rec
