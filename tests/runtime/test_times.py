"""Go durations, as kube-controller-manager's duration flags take them."""

from __future__ import annotations

import argparse

import pytest

from steward.runtime.times import InvalidDurationError, go_duration

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("8760h", 8760 * 3600),
        ("8760h0m0s", 8760 * 3600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        (".5s", 0.5),
        ("300ms", 0.3),
        ("-2m", -120),
        ("0", 0),
    ],
)
def test_go_durations_read_as_go_reads_them(text: str, seconds: float) -> None:
    assert go_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "h", "1d", "1h 2m", "--1s", "abc"])
def test_what_go_refuses_is_refused_with_argparses_message(text: str) -> None:
    """A flag's bad value gets argparse's own error (the message, not a traceback)."""
    with pytest.raises(InvalidDurationError, match="invalid duration"):
        go_duration(text)
    parser = argparse.ArgumentParser(prog="x", exit_on_error=False)
    parser.add_argument("--period", type=go_duration)
    with pytest.raises(argparse.ArgumentError, match="time: invalid duration"):
        parser.parse_args([f"--period={text}"])
