"""What every detector returns."""

from __future__ import annotations

from typing import NamedTuple


class Found(NamedTuple):
    """One detected value.

    Attributes:
        start, end: code-point offsets in the text searched (``text[start:end]``
            is the matched value, separators included).
        value: the value in a canonical form (digits only, lower-case e-mail,
            E.164 phone, compressed IP): equal values hash to equal tokens.
    """

    start: int
    end: int
    value: str
