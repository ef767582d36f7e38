"""Resource quantities as the API server writes them (``"250m"``, ``"1.5Gi"``, ``"1e3"``):
exact numbers, and milli-units rounded up as apimachinery's ``Quantity.MilliValue``.

# Errors
What is not a quantity raises :class:`ValueError` saying so; a caller that treats an
unreadable quantity as absent catches it.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_NUMBER = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)")
_EXPONENT = re.compile(r"[eE][+-]?[0-9]+")
_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(text: str | int | float) -> Fraction:
    """A resource quantity (``"1.5"``, ``"250m"``, ``"2Gi"``, ``"1e3"``) as an exact number.

    Raises:
        ValueError: not a quantity.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise ValueError(f"not a quantity: {text!r}")
        text = repr(text)
    match = _NUMBER.fullmatch(text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    sign, digits, suffix = match.groups()
    if suffix in _SUFFIXES:
        factor = _SUFFIXES[suffix]
    elif _EXPONENT.fullmatch(suffix):
        factor = Fraction(10) ** int(suffix[1:])
    else:
        raise ValueError(f"not a quantity: {text!r}")
    value = Fraction(digits) * factor
    return -value if sign == "-" else value


def parse_quantity_milli(text: str | int | float) -> int:
    """A resource quantity in milli-units, rounded up as ``Quantity.MilliValue`` rounds
    (``"1.5"`` → 1500, ``"250m"`` → 250, ``"1Ki"`` → 1024000, ``"1n"`` → 1).

    Raises:
        ValueError: not a quantity.
    """
    return math.ceil(parse_quantity(text) * 1000)
