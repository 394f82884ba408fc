"""Argument checks shared by public functions of the pipeline (and open to
the stages): one wording of each error, so a message names the argument, the
bound and the value it got.

Standard library only.
"""

from __future__ import annotations

from typing import Any


def check_int(name: str, value: Any, minimum: int, where: str = "", type_error: bool = False) -> int:
    """Check that ``value`` is an int (``bool`` is not) of at least ``minimum``.

    Args:
        name: the argument's (or field's) name, for the message.
        value: what was given.
        minimum: the smallest value allowed.
        where: a prefix for the message, e.g. ``"corpora/v1/manifest.json: "``.
        type_error: raise ``TypeError`` for a value that is not an int (a
            programming error: the training-order functions), instead of
            ``ValueError`` (a value read from a file or a command line).

    Returns:
        ``value``.

    Raises:
        TypeError: with ``type_error``, ``value`` is not an int:
            ``"<name> must be an int, got <type>"``.
        ValueError: ``value`` is below ``minimum`` (or not an int, without
            ``type_error``): ``"<name> must be an int >= <minimum>, got <value!r>"``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        if type_error:
            raise TypeError(f"{where}{name} must be an int, got {type(value).__name__}")
        raise ValueError(f"{where}{name} must be an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{where}{name} must be an int >= {minimum}, got {value!r}")
    return value
