"""Phone numbers: a cheap regex finds digit runs, ``phonenumbers`` validates.

``phonenumbers`` (the Python port of Google's libphonenumber, whose metadata
lists every country's number plan) decides whether a digit run is a number
that can be dialled; its own text scanner (``PhoneNumberMatcher``) is not
used: it tries every digit run of the text through the full parser, 4-5x
the CPU time of this module on 8.1 M characters of prose (``bench.pii``,
docs/stages/pii.md). Here the
library only sees candidates that already have the shape of a phone number.

A candidate (:data:`_CANDIDATE`) is 8-24 characters of ASCII digits with
single spaces, dashes and one pair of parentheses, optionally starting with
``+``, not inside a word, a version (``3.11.7``), a path or a longer number.
It is then accepted when (:func:`accept`):

* it starts with ``+`` (the international E.164 form, ITU-T E.164; any
  country), has 8-15 digits, and ``phonenumbers.is_valid_number`` holds
  (the library's ``Leniency.VALID``: a number of a real range of its
  country, not only of a possible length, ``Leniency.POSSIBLE``, which
  passes most 8-15 digit runs; ``STRICT_GROUPING`` would refuse the common
  ``1380 013 8000`` groupings);
* or, without ``+``, for a region of ``regions`` (default ``CN``): for CN
  only the two national forms that cannot be something else by chance, a
  mainland mobile (11 digits, ``1[3-9]``, MIIT numbering plan) or a landline
  written with its trunk prefix and area code (``0`` + 2-3 digit area code +
  7-8 digit subscriber number: 10-12 digits, ``010 6552 1234``); a number
  written without its area code (``6552 1234``) is not detected: eight bare
  digits are as often a date (``20231001``) or an amount. For any other
  region, 10-15 digits that ``is_valid_number`` accepts for that region. In
  both, every group of digits has at least 2 digits (``1 2 3 4 5 6 7 8 9 0``
  is a list, not a number);
* a candidate starting ``0086`` (the international call prefix dialled
  from mainland China, ``00`` as ITU-T E.164 recommends, and country code
  86: ``0086-138-0013-8000``, ``0086 138 0013 8000``, ``008613800138000``)
  is read as ``+86`` and the rest, and accepted only as a CN number; other
  ``00`` + country code forms are not read (a ``00``-led digit run is as
  often a serial or an account number, and the CN one is what this
  Chinese-first corpus writes). Not detected: ``8613800138000`` (13 digits
  with no ``+`` or ``00``: as often an order or account number, and a
  millisecond timestamp has 13 digits too) and ``138.0013.8000`` (a ``.``
  between digit groups is a version's or a decimal's; the candidate never
  crosses one, so ``3.11.7`` and ``138.0.13.80`` are never tried);
* a digit repeated 7 or more times in a row (``037777777777``, an octal
  constant; ``0000000000``) is not a number a person has;
* a candidate that fails as a whole is tried as its space-separated windows
  (``编号 2023 138 0013 8000``: ``138 0013 8000``), longest first.

Value: the E.164 form (``+8613800138000``). O(len(text)).
"""

from __future__ import annotations

import re
from functools import lru_cache

import phonenumbers

from stages.pii.found import Found

_CANDIDATE = re.compile(
    r"(?<![\w+.\-/\\@$#(])"          # not inside a word, number, version, path
    r"(?:\+ ?|\()?"                  # "+" (E.164) or the "(" of an area code
    r"\d[\d\- ()]{6,22}\d"           # digits with separators
    r"(?![\w\-]|[.:/]\d)",           # not followed by more of a word or number
    re.ASCII)
#: How a CN mobile number is written in groups of digits (3-4-4 as MIIT
#: prints it, 4-3-4 and 4-4-3 as people group it, 3-8, 7-4, or one run).
#: Other groupings are columns of a table (``16 520 196 465``, ``13 353 526
#: 502``: random 2-3 digit cells that add up to 11 digits starting 1[3-9];
#: 41 such "phones" per 100 K characters of a random 3-digit table before).
CN_MOBILE_GROUPS = frozenset({(11,), (3, 4, 4), (4, 3, 4), (4, 4, 3), (3, 8), (7, 4)})
_REPEATED = re.compile(r"(\d)\1{6}")
_SPLIT = re.compile(r"[ \-()+]+")
_PARENS = re.compile(r"^(?:\+ ?\d{1,3} ?)?\(\+?\d{1,4}\)[ \-]?\d")


def _cn_landline_groups(groups: tuple[int, ...]) -> bool:
    """A CN landline in groups: one run, or an area code of 3-4 digits
    (trunk ``0`` included) and a subscriber number of 7-8 digits in one run
    or as 3-4, 4-3 or 4-4."""
    return len(groups) == 1 or groups[0] in (3, 4) and groups[1:] in ((7,), (8,), (3, 4), (4, 3), (4, 4))


def _shape_ok(candidate: str, national: bool) -> bool:
    """Separators: no doubled space or dash, at most one ``( ... )`` pair
    near the start; national forms: every digit group has 2+ digits."""
    if "  " in candidate or "--" in candidate or _REPEATED.search(candidate):
        return False
    if "(" in candidate or ")" in candidate:
        if candidate.count("(") != 1 or candidate.count(")") != 1 or not _PARENS.match(candidate):
            return False
    if national:
        groups = [g for g in _SPLIT.split(candidate) if g]
        if any(len(g) < 2 for g in groups):
            return False
    return True


@lru_cache(maxsize=65536)
def accept(candidate: str, regions: tuple[str, ...]) -> str | None:
    """The E.164 form of ``candidate`` when it is a phone number by the rules
    of this module, else None. ``regions``: ISO 3166-1 alpha-2 codes whose
    national forms (without ``+``) are accepted."""
    if candidate.startswith("0086") and len(candidate) > 4:
        # 0086: the international prefix dialled from mainland China (and the ITU-T
        # recommended "00" elsewhere) + country code 86, i.e. "+86"; only a CN number
        value = accept("+86" + candidate[4:], regions)
        return value if value is not None and value.startswith("+86") else None
    digits = "".join(ch for ch in candidate if ch.isdigit())
    n = len(digits)
    if candidate.startswith("+"):
        if not 8 <= n <= 15 or not _shape_ok(candidate, national=False):
            return None
        tries: tuple[str | None, ...] = (None,)
    else:
        if not 10 <= n <= 15 or not _shape_ok(candidate, national=True):
            return None
        groups = tuple(len(g) for g in _SPLIT.split(candidate) if g)
        tries = tuple(r for r in regions if r != "CN" or (
            (n == 11 and digits[0] == "1" and digits[1] in "3456789" and groups in CN_MOBILE_GROUPS)
            or (digits[0] == "0" and digits[1] != "0" and n <= 12 and _cn_landline_groups(groups))))
    for region in tries:
        try:
            number = phonenumbers.parse(candidate, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    return None


def find(text: str, regions: tuple[str, ...] = ("CN",)) -> list[Found]:
    """Phone numbers in ``text`` (value: E.164). ``regions``: see :func:`accept`."""
    out: list[Found] = []
    for m in _CANDIDATE.finditer(text):
        candidate = m.group(0)
        value = accept(candidate, regions)
        if value is not None:
            out.append(Found(m.start(), m.end(), value))
        elif " " in candidate:
            out.extend(_windows(candidate, m.start(), regions))
    return out


def _windows(candidate: str, offset: int, regions: tuple[str, ...]) -> list[Found]:
    """Space-separated windows of a rejected candidate that are numbers,
    longest first, left to right, not overlapping."""
    bounds = [(g.start(), g.end()) for g in re.finditer(r"[^ ]+", candidate)]
    # digits before each group: a window outside 8-15 digits is no number (accept
    # would say so at the cost of a call; digit-dense tables have many windows)
    before = [0]
    for s, e in bounds:
        before.append(before[-1] + sum(ch.isdigit() for ch in candidate[s:e]))
    out: list[Found] = []
    taken: list[tuple[int, int]] = []
    k = len(bounds)
    for size in range(k - 1, 0, -1):
        for i in range(0, k - size + 1):
            if not 8 <= before[i + size] - before[i] <= 15:
                continue
            start, end = bounds[i][0], bounds[i + size - 1][1]
            if any(start < e and s < end for s, e in taken):
                continue
            piece = candidate[start:end]
            if not piece[0].isdigit() and piece[0] not in "+(" or not piece[-1].isdigit():
                continue
            value = accept(piece, regions)
            if value is not None:
                taken.append((start, end))
                out.append(Found(offset + start, offset + end, value))
    return sorted(out)
