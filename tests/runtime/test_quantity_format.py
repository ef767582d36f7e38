"""Quantities' formats and canonical strings, against what apimachinery prints.

The expected strings are those of apimachinery's own tests and of ``kubectl get -o yaml``
(a quantity the API server stored is printed canonically): ``1000m`` comes back as ``1``,
``1024Mi`` as ``1Gi``, ``1.5`` as ``1500m``.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from steward.runtime.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    format_quantity,
    parse_quantity,
    quantity_format,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("1", DECIMAL_SI),
        ("500m", DECIMAL_SI),
        ("1.5G", DECIMAL_SI),
        ("2E", DECIMAL_SI),  # exa, not an exponent
        ("128Mi", BINARY_SI),
        ("1Ki", BINARY_SI),
        ("1e3", DECIMAL_EXPONENT),
        ("1E3", DECIMAL_EXPONENT),
        (3, DECIMAL_SI),
    ],
)
def test_format_of_text(text: str, fmt: str) -> None:
    """Catches: a binary suffix taken as decimal (sums of memory would print as bytes), or
    ``E`` (exa) taken for an exponent."""
    assert quantity_format(text) == fmt


def test_format_of_garbage_raises() -> None:
    """Catches: a malformed quantity given a format instead of refused."""
    with pytest.raises(ValueError, match="not a quantity"):
        quantity_format("12 apples")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", "0"),
        ("1000m", "1"),
        ("1.5", "1500m"),
        ("500m", "500m"),
        ("1500m", "1500m"),
        ("12000", "12k"),
        ("1200", "1200"),
        ("0.1", "100m"),
        ("1n", "1n"),
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("128Mi", "128Mi"),
        ("1Ki", "1Ki"),
        ("1536", "1536"),
        ("1e3", "1e3"),
        ("12e6", "12e6"),
        ("1.5e3", "1500"),
        ("100M", "100M"),
    ],
)
def test_canonical_string(text: str, expected: str) -> None:
    """Catches: a sum printed in a form the API server would not have written (trailing
    zeros kept, an exponent not a multiple of three, a binary value printed in bytes)."""
    assert format_quantity(parse_quantity(text), quantity_format(text)) == expected


@pytest.mark.parametrize(
    ("value", "fmt", "expected"),
    [
        (Fraction(1023), BINARY_SI, "1023"),  # under 1024: decimal
        (Fraction(2047, 2), BINARY_SI, "1023500m"),  # not whole: decimal
        (Fraction(1025), BINARY_SI, "1025"),
        (Fraction(2048), BINARY_SI, "2Ki"),
        (Fraction(1, 3), DECIMAL_SI, "333333334n"),  # rounded up at nano precision
        (Fraction(-3, 2), DECIMAL_SI, "-1500m"),
        (Fraction(5), "Unknown", "5"),
        (Fraction(5000), "Unknown", "5e3"),
    ],
)
def test_canonical_edges(value: Fraction, fmt: str, expected: str) -> None:
    """Catches: the binary format's fall-backs to decimal, the nano rounding, negative
    values or an unknown format mishandled."""
    assert format_quantity(value, fmt) == expected
