"""Mainland China resident identity card numbers (居民身份证号码).

No library checks these; the rules are GB 11643-1999 ("Citizen identification
number"):

* 18 characters: a 6-digit administrative division code (GB/T 2260), whose
  first two digits are a province-level code (:data:`PROVINCES`), the birth
  date ``YYYYMMDD``, a 3-digit sequence number, and a check character from ISO
  7064:1983 MOD 11-2 over the first 17 digits (weights ``2**(17-i) mod 11``,
  check ``(12 - sum mod 11) mod 11``, 10 written ``X``). Accepted when the
  province code is listed, the date is a real calendar date with a year in
  1900-2029 (fixed bounds, not "today": the same input gives the same output
  in any year), and the check character is right. A random 18-digit run
  passes about 1 time in 11 x 3 x 40 ~ 1,300.
* 15 digits, the form issued before 1999: province code, ``YYMMDD`` (19YY)
  and a 3-digit sequence, *no* check digit. A random 15-digit run passes the
  province and date tests about 1 time in 100, so the old form is accepted
  only with one of :data:`OLD_FORM_KEYWORDS` in the 24 characters before it
  (``身份证号：``, ``ID card no.``).

Not inside a longer number, word or decimal (ASCII boundaries, so ``身份证号
110101199003074578`` and ``号码110101199003074578。`` are found). Value: the
number with ``x`` upper-cased. O(len(text)).
"""

from __future__ import annotations

import datetime
import re

from stages.pii.found import Found

#: Province-level codes of GB/T 2260 (31 mainland provinces, regions and
#: municipalities; 71 Taiwan, 81 Hong Kong, 82 Macao), and 83 (residence
#: permits of Hong Kong, Macao and Taiwan residents, State Council 2018).
PROVINCES = frozenset({11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46,
                       50, 51, 52, 53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83})
WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)   # 2**(17-i) mod 11, i = 1..17
CHECK = "10X98765432"                                             # index: weighted sum mod 11
MIN_YEAR, MAX_YEAR = 1900, 2029
OLD_FORM_KEYWORDS = ("身份证", "身份證", "证件号", "證件號", "id card", "identity card", "id no", "id number")
_KEYWORD_WINDOW = 24

_CANDIDATE = re.compile(r"(?<![\w.\-+/])(\d{17}[\dXx]|\d{15})(?![\w\-]|[.:/]\d)", re.ASCII)


def check_character(first17: str) -> str:
    """The ISO 7064 MOD 11-2 check character (``0``-``9`` or ``X``) of 17 digits."""
    return CHECK[sum(int(d) * w for d, w in zip(first17, WEIGHTS)) % 11]


def _real_date(year: int, month: int, day: int) -> bool:
    if not MIN_YEAR <= year <= MAX_YEAR:
        return False
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return True


def valid18(number: str) -> bool:
    """Whether an 18-character number (17 digits + digit or ``X``) passes
    the province, birth-date and check-character tests."""
    if int(number[:2]) not in PROVINCES:
        return False
    if not _real_date(int(number[6:10]), int(number[10:12]), int(number[12:14])):
        return False
    return check_character(number[:17]) == number[17].upper()


def valid15(number: str) -> bool:
    """Whether a 15-digit number passes the province and birth-date (19YYMMDD) tests."""
    return int(number[:2]) in PROVINCES and _real_date(1900 + int(number[6:8]), int(number[8:10]),
                                                       int(number[10:12]))


def find(text: str) -> list[Found]:
    """Resident ID numbers in ``text`` (value: the number, ``X`` upper case)."""
    out: list[Found] = []
    for m in _CANDIDATE.finditer(text):
        number = m.group(1)
        if len(number) == 18:
            ok = valid18(number)
        else:
            before = text[max(0, m.start() - _KEYWORD_WINDOW):m.start()].lower()
            ok = valid15(number) and any(k in before for k in OLD_FORM_KEYWORDS)
        if ok:
            out.append(Found(m.start(), m.end(), number.upper()))
    return out
