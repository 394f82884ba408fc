"""Payment card numbers (PANs).

ISO/IEC 7812-1: a card number is 8-19 digits ending in a Luhn (mod 10)
check digit; its leading digits (the issuer identification number) name the
scheme. Accepted (:func:`valid`): 13-19 digits, written in one run or in
groups separated by single spaces or dashes (the printed 4-4-4-4, 4-4-4-4-3
and Amex 4-6-5 layouts: :data:`PRINTED_LAYOUTS`), that pass Luhn AND
start with a prefix of a major scheme, with that scheme's lengths
(:data:`ISSUERS`, from the schemes' published ranges as collected in the
"Payment card number" IIN table, and UnionPay's own rules):

==========  ==========================================  ============
scheme      prefix                                      lengths
==========  ==========================================  ============
UnionPay    62                                          16-19
Visa        4                                           13, 16, 19
Mastercard  51-55, 2221-2720                            16
Amex        34, 37                                      15
JCB         3528-3589                                   16-19
Discover    6011, 644-649, 65                           16-19
==========  ==========================================  ============

A random digit run of a right length passes Luhn 1 time in 10 and a prefix
about 1 time in 5-50, so timestamps (``1696118400000``), ISBNs (``978...``)
and most numeric constants are not cards. Value: the digits. O(len(text)).
"""

from __future__ import annotations

import re

from stages.pii.found import Found

#: (first digits low, high, prefix length) -> allowed lengths.
ISSUERS: tuple[tuple[int, int, int, frozenset[int]], ...] = (
    (62, 62, 2, frozenset(range(16, 20))),                  # UnionPay
    (4, 4, 1, frozenset({13, 16, 19})),                     # Visa
    (51, 55, 2, frozenset({16})),                           # Mastercard
    (2221, 2720, 4, frozenset({16})),                       # Mastercard 2-series (2017)
    (34, 34, 2, frozenset({15})), (37, 37, 2, frozenset({15})),   # American Express
    (3528, 3589, 4, frozenset(range(16, 20))),              # JCB
    (6011, 6011, 4, frozenset(range(16, 20))),              # Discover
    (644, 649, 3, frozenset(range(16, 20))),
    (65, 65, 2, frozenset(range(16, 20))),
)

#: How card numbers are printed in groups (or written in one run): fours with
#: a last group of 1-4 (Visa 13 is 4-4-4-1, 19 digits 4-4-4-4-3), Amex 4-6-5,
#: Diners 4-6-4. Any other grouping is cells of a table (``341 444 602 328
#: 526``, ``3728 211 3278 8851``: 15 Luhn-and-prefix "cards" per 100 K
#: characters of a random 3-digit table with groups of 3-6 allowed).
PRINTED_LAYOUTS = frozenset({(4, 4, 4, 1), (4, 4, 4, 2), (4, 4, 4, 3), (4, 4, 4, 4), (4, 4, 4, 4, 1),
                             (4, 4, 4, 4, 2), (4, 4, 4, 4, 3), (4, 6, 5), (4, 6, 4)})

# 13+ characters of digits and separators (the lookahead skips short numbers
# inside the regex engine), then a digit run and up to 5 more groups.
_CANDIDATE = re.compile(r"(?<![\w.\-+/])(?=\d[\d \-]{12})\d{3,19}(?:[ \-]\d{1,6}){0,5}(?![\w\-]|[.:/]\d)",
                        re.ASCII)
_GROUPS = re.compile(r"\d+(?:(?P<sep>[ \-])\d+(?:(?P=sep)\d+)*)?", re.ASCII)


def luhn(digits: str) -> bool:
    """Whether ``digits`` ends in a right Luhn check digit (ISO/IEC 7812-1 Annex B)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def issuer_ok(digits: str) -> bool:
    """Whether ``digits`` starts with a prefix of :data:`ISSUERS` with a length that scheme uses."""
    n = len(digits)
    for low, high, width, lengths in ISSUERS:
        if n in lengths and low <= int(digits[:width]) <= high:
            return True
    return False


def valid(written: str) -> bool:
    """Whether ``written`` (digits with single, uniform spaces or dashes) is
    a card number: 13-19 digits, ungrouped or in a layout of
    :data:`PRINTED_LAYOUTS`, Luhn and a known issuer."""
    if not _GROUPS.fullmatch(written):
        return False
    groups = re.split(r"[ \-]", written)
    if len(groups) > 1 and tuple(map(len, groups)) not in PRINTED_LAYOUTS:
        return False
    digits = "".join(groups)
    return 13 <= len(digits) <= 19 and issuer_ok(digits) and luhn(digits)


def find(text: str) -> list[Found]:
    """Card numbers in ``text`` (value: the digits)."""
    out: list[Found] = []
    for m in _CANDIDATE.finditer(text):
        written = m.group(0)
        # a run that fails as a whole is tried without its last groups
        # ("6222 0200 1234 5678 901 2023": the card and a year)
        while len(written) >= 13:
            if valid(written):
                out.append(Found(m.start(), m.start() + len(written), written.replace(" ", "").replace("-", "")))
                break
            cut = max(written.rfind(" "), written.rfind("-"))
            if cut <= 0:
                break
            written = written[:cut]
    return out
