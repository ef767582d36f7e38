"""Rate limiter numbers: client-go's per-item backoff, token bucket, and their maximum."""

from __future__ import annotations

import pytest

from steward.runtime import (
    FakeClock,
    ItemExponentialBackoff,
    MaxOf,
    TokenBucket,
    default_controller_rate_limiter,
)

pytestmark = pytest.mark.unit


def test_backoff_doubles_from_5ms() -> None:
    limiter = ItemExponentialBackoff[str]()
    delays = [limiter.when("a") for _ in range(6)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08, 0.16])
    assert limiter.num_requeues("a") == 6


def test_backoff_caps_at_1000s() -> None:
    limiter = ItemExponentialBackoff[str]()
    delays = [limiter.when("a") for _ in range(20)]
    assert delays[17] == pytest.approx(0.005 * 2**17)  # 655.36 s, the last under the cap
    assert delays[18] == 1000.0
    assert delays[19] == 1000.0


def test_backoff_survives_huge_counts() -> None:
    limiter = ItemExponentialBackoff[str]()
    for _ in range(3000):
        last = limiter.when("a")
    assert last == 1000.0
    assert limiter.num_requeues("a") == 3000


def test_backoff_is_per_item_and_forget_resets() -> None:
    limiter = ItemExponentialBackoff[str]()
    limiter.when("a")
    limiter.when("a")
    assert limiter.when("b") == pytest.approx(0.005)
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)
    limiter.forget("never-seen")


def test_backoff_custom_numbers() -> None:
    limiter = ItemExponentialBackoff[str](base_delay=1.0, max_delay=3.0)
    assert [limiter.when("a") for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]


def test_backoff_rejects_negative_delays() -> None:
    with pytest.raises(ValueError, match="negative"):
        ItemExponentialBackoff[str](base_delay=-1)


def test_bucket_burst_then_one_per_tenth_of_a_second() -> None:
    clock = FakeClock()
    bucket = TokenBucket[str](clock=clock)
    assert [bucket.when(str(i)) for i in range(100)] == [0.0] * 100
    assert bucket.when("x") == pytest.approx(0.1)  # the 101st
    assert bucket.when("y") == pytest.approx(0.2)  # reservations stack up
    assert bucket.when("z") == pytest.approx(0.3)
    assert bucket.num_requeues("x") == 0


def test_bucket_refills_at_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket[str](clock=clock)
    for i in range(102):
        bucket.when(str(i))  # tokens now -2
    clock.advance(0.2)  # +2 tokens: back to 0
    assert bucket.when("a") == pytest.approx(0.1)
    clock.advance(1.1)  # -1 + 11 = 10 tokens
    assert [bucket.when("b") for _ in range(10)] == [0.0] * 10
    assert bucket.when("c") == pytest.approx(0.1)


def test_bucket_never_holds_more_than_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket[str](clock=clock)
    clock.advance(3600)
    assert [bucket.when("a") for _ in range(100)] == [0.0] * 100
    assert bucket.when("a") == pytest.approx(0.1)


def test_bucket_custom_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket[str](rate=2, burst=1, clock=clock)
    assert bucket.when("a") == 0.0
    assert bucket.when("a") == pytest.approx(0.5)
    assert bucket.when("a") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rate"):
        TokenBucket[str](rate=0)


def test_max_of_takes_the_longest_delay_and_highest_count() -> None:
    slow = ItemExponentialBackoff[str](base_delay=1.0, max_delay=100.0)
    fast = ItemExponentialBackoff[str](base_delay=0.5, max_delay=100.0)
    limiter = MaxOf(slow, fast)
    assert limiter.when("a") == 1.0
    assert limiter.when("a") == 2.0
    assert fast.num_requeues("a") == 2  # every limiter counts
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert slow.num_requeues("a") == fast.num_requeues("a") == 0
    with pytest.raises(ValueError, match="at least one"):
        MaxOf[str]()


def test_default_controller_rate_limiter() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock)
    # Same item: the backoff dominates (the bucket is far from empty).
    assert [limiter.when("a") for _ in range(4)] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert limiter.num_requeues("a") == 4
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    # Distinct items: 96 more tokens at 5 ms each, then the empty bucket dominates.
    assert [limiter.when(f"k{i}") for i in range(96)] == pytest.approx([0.005] * 96)
    assert limiter.when("k-next") == pytest.approx(0.1)
    assert limiter.when("k-after") == pytest.approx(0.2)
