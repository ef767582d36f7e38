"""How :func:`~.test_scenarios.run_both` ends a scenario: the first real failure of a side,
and a checkpoint the sides never both reach is a failure too, not a pass.

The scenarios here touch no cluster: a side is only its name, and each scenario only
meets the other side at checkpoints (whose comparison of the HPAs is left out)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import cast

import pytest

from tests.controllers.hpa.conftest import Side
from tests.controllers.hpa.test_scenarios import Pair, run_both

pytestmark = [pytest.mark.unit]

MEET = 0.5
"""Seconds a side waits for the other one at a checkpoint here."""


@dataclass
class Named:
    name: str


STEWARD = cast(Side, Named("steward"))
UPSTREAM = cast(Side, Named("upstream"))


def meet(pair: Pair, side: Side) -> None:
    """A checkpoint with nothing to compare."""
    pair.barrier.wait()
    pair.barrier.wait()


def test_both_sides_meeting_at_every_checkpoint_pass() -> None:
    met: list[str] = []

    def scenario(side: Side, pair: Pair) -> None:
        meet(pair, side)
        meet(pair, side)
        met.append(side.name)

    run_both(STEWARD, UPSTREAM, scenario, timeout=MEET)
    assert sorted(met) == ["steward", "upstream"]


def test_a_side_that_never_arrives_times_both_out_and_fails() -> None:
    """Steward's side comes late to the checkpoint: upstream's wait times out, breaking
    the barrier, and Steward's finds it broken. Neither raised anything but a broken
    barrier, which used to pass."""

    def scenario(side: Side, pair: Pair) -> None:
        if side.name == "steward":
            time.sleep(MEET * 3)
        meet(pair, side)

    with pytest.raises(AssertionError, match="did not meet") as failed:
        run_both(STEWARD, UPSTREAM, scenario, timeout=MEET)
    assert "upstream and steward side" in str(failed.value)
    assert isinstance(failed.value.__cause__, threading.BrokenBarrierError)


def test_a_side_that_finishes_without_the_checkpoint_fails() -> None:
    """Upstream's side ends with no checkpoint; Steward's waits at one until it breaks."""

    def scenario(side: Side, pair: Pair) -> None:
        if side.name == "steward":
            meet(pair, side)

    with pytest.raises(AssertionError, match="did not meet") as failed:
        run_both(STEWARD, UPSTREAM, scenario, timeout=MEET)
    assert "on the steward side while the upstream side finished" in str(failed.value)


@pytest.mark.parametrize("failing", ["steward", "upstream"])
def test_a_real_failure_is_reported_over_the_other_sides_broken_barrier(failing: str) -> None:
    """One side fails before the checkpoint; the other, waiting there, finds the barrier
    broken: the report is the real failure, of the side that had it."""
    waited: list[BaseException] = []

    def scenario(side: Side, pair: Pair) -> None:
        if side.name == failing:
            raise AssertionError(f"{side.name}: the check failed")
        try:
            meet(pair, side)
        except threading.BrokenBarrierError as broken:
            waited.append(broken)
            raise

    with pytest.raises(AssertionError, match=f"failed on the {failing} side") as failed:
        run_both(STEWARD, UPSTREAM, scenario, timeout=60.0)
    assert f"{failing}: the check failed" in str(failed.value)
    assert len(waited) == 1, "the other side should have stopped at its checkpoint"
