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


# Formats and canonical strings ------------------------------------------------------------
# apimachinery's Quantity remembers the format its text was written in and prints itself
# in that format's canonical form (Quantity.String, CanonicalizeBytes in
# staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go): what a sum of quantities
# looks like depends on which format it carries, so a controller that writes sums (the
# resource quota controller's status.used) needs both.

DECIMAL_SI = "DecimalSI"
"""Decimal SI suffixes (``m``, ``k``, ``M``, ...) or none: ``"500m"``, ``"1"``, ``"12k"``."""
BINARY_SI = "BinarySI"
"""Binary SI suffixes (``Ki``, ``Mi``, ...): ``"128Mi"``, ``"1Gi"``."""
DECIMAL_EXPONENT = "DecimalExponent"
"""An exponent: ``"1e3"``, ``"12e6"``."""

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {
    -9: "n",
    -6: "u",
    -3: "m",
    0: "",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}


def quantity_format(text: str | int | float) -> str:
    """The format apimachinery's ``ParseQuantity`` gives ``text``: :data:`BINARY_SI` for a
    binary suffix, :data:`DECIMAL_EXPONENT` for an exponent, else :data:`DECIMAL_SI`
    (numbers without suffix included).

    Raises:
        ValueError: not a quantity.
    """
    parse_quantity(text)  # the same errors as parsing
    if not isinstance(text, str):
        return DECIMAL_SI
    match = _NUMBER.fullmatch(text)
    assert match is not None
    suffix = match.group(3)
    if suffix.endswith("i"):
        return BINARY_SI
    if _EXPONENT.fullmatch(suffix):
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def format_quantity(value: Fraction | int, fmt: str = DECIMAL_SI) -> str:
    """``value`` as apimachinery prints a Quantity of format ``fmt`` (its canonical form):
    zero is ``"0"``; :data:`BINARY_SI` uses the largest binary suffix that keeps the number
    whole (``1536Mi``), but a value under 1024 in magnitude or not whole prints as
    :data:`DECIMAL_SI`; the decimal formats strip trailing zeros and take the exponent down
    to a multiple of three (``1.5`` → ``"1500m"``, ``12000`` → ``"12k"``, ``1200`` →
    ``"1200"``; :data:`DECIMAL_EXPONENT`: ``"12e3"``). Precision below 10⁻⁹ rounds up, as
    a Quantity's does. An unknown format prints as :data:`DECIMAL_EXPONENT`, as upstream's."""
    value = Fraction(value)
    if value == 0:
        return "0"
    if fmt == BINARY_SI:
        if -1024 < value < 1024 or value.denominator != 1:
            fmt = DECIMAL_SI
        else:
            number, power = int(value), 0
            while number % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
                number //= 1024
                power += 1
            return f"{number}{_BINARY_SUFFIXES[power]}"
    elif fmt != DECIMAL_SI:
        fmt = DECIMAL_EXPONENT
    mantissa, exponent = math.ceil(value * 10**9), -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    if fmt == DECIMAL_SI and exponent in _DECIMAL_SUFFIXES:
        return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)
