"""Client-side rate limits (:mod:`steward.flowcontrol`): client-go's token bucket, the
``--kube-api-qps``/``--kube-api-burst`` flags of every host, and the ``rest_client_*``
metrics of requests that really reach the API server."""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import uuid

import pytest
from prometheus_client import REGISTRY

from steward.cluster import LocalCluster
from steward.flowcontrol import TokenBucket, add_rate_limit_arguments, bucket_from_args
from steward.kube import ClusterAccess, KubeClient, load_access


class _Time:
    """A clock tests move, and a ``sleep`` that records instead of sleeping."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))


def _bucket(qps: float, burst: int) -> tuple[TokenBucket, _Time]:
    t = _Time()
    return TokenBucket(qps, burst, now=lambda: t.now, sleep=t.sleep), t


@pytest.mark.unit
def test_a_full_bucket_lets_a_burst_through_then_paces_at_qps() -> None:
    bucket, t = _bucket(qps=20, burst=30)
    assert [bucket.wait() for _ in range(30)] == [0.0] * 30
    # No time passed: each further caller reserves the next token, 1/qps apart.
    assert [round(bucket.wait(), 6) for _ in range(3)] == [0.05, 0.1, 0.15]
    assert t.slept == [0.05, 0.1, 0.15]


@pytest.mark.unit
def test_tokens_refill_at_qps_up_to_the_burst() -> None:
    bucket, t = _bucket(qps=10, burst=2)
    bucket.wait(), bucket.wait()
    t.now += 0.1  # one token back
    assert bucket.wait() == 0.0
    assert round(bucket.wait(), 6) == 0.1
    t.now += 60  # a long quiet spell refills to the burst, not beyond
    assert [bucket.wait() for _ in range(2)] == [0.0, 0.0]
    assert round(bucket.wait(), 6) == 0.1


@pytest.mark.unit
def test_a_qps_of_zero_or_less_means_no_limit() -> None:
    for qps in (0, -1):
        bucket, t = _bucket(qps=qps, burst=0)
        assert bucket.unlimited
        assert all(bucket.wait() == 0.0 for _ in range(1000))
        assert t.slept == []


@pytest.mark.unit
def test_callers_on_many_threads_each_get_their_own_token() -> None:
    bucket, _ = _bucket(qps=100, burst=5)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        w = bucket.wait()
        with lock:
            waits.append(round(w, 6))

    threads = [threading.Thread(target=take) for _ in range(25)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # 5 from the bucket, then one reservation each 10 ms apart: no two share a token.
    assert sorted(waits) == [0.0] * 5 + [round(0.01 * i, 6) for i in range(1, 21)]


@pytest.mark.unit
def test_the_flags_have_kube_controller_managers_names_and_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_rate_limit_arguments(parser)
    args = parser.parse_args([])
    assert (args.kube_api_qps, args.kube_api_burst) == (20.0, 30)
    bucket = bucket_from_args(parser.parse_args(["--kube-api-qps=1000", "--kube-api-burst=2000"]))
    assert (bucket.qps, bucket.burst) == (1000.0, 2000)
    with pytest.raises(ValueError, match="--kube-api-burst must be at least 1"):
        bucket_from_args(parser.parse_args(["--kube-api-burst=0"]))
    assert bucket_from_args(parser.parse_args(["--kube-api-qps=0", "--kube-api-burst=0"])).unlimited


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "steward", "run", "job", "--insecure-plaintext"],
        [sys.executable, "-m", "steward.cli", "informer", "--insecure-plaintext"],
    ],
    ids=["controller host", "informer"],
)
def test_a_burst_below_one_is_a_usage_error(argv: list[str]) -> None:
    proc = subprocess.run(
        [*argv, "--kube-api-qps=5", "--kube-api-burst=0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--kube-api-burst must be at least 1" in proc.stderr


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.integration
def test_every_request_to_the_api_server_takes_a_token_and_is_counted(
    cluster: LocalCluster, namespace: str
) -> None:
    bucket, t = _bucket(qps=4, burst=2)
    access = load_access(str(cluster.kubeconfig))
    host = access.host.split("://", 1)[1]
    api = KubeClient(access, rate_limiter=bucket)
    before_post = _sample("rest_client_requests_total", code="201", method="POST", host=host)
    before_get = _sample("rest_client_requests_total", code="200", method="GET", host=host)
    before_bytes = _sample("rest_client_response_size_bytes_sum", verb="GET", host=host)
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    try:
        for i in range(3):
            api.request("POST", path, {"metadata": {"name": f"c{i}-{uuid.uuid4().hex[:4]}"}})
        listing = api.request("GET", path)
    finally:
        api.close()
    assert len(listing["items"]) >= 3  # the requests really reached the API server
    # Two from the full bucket, then a quarter and a half second's reservations.
    assert t.slept == [0.25, 0.5]
    assert _sample("rest_client_requests_total", code="201", method="POST", host=host) == (
        before_post + 3
    )
    assert _sample("rest_client_requests_total", code="200", method="GET", host=host) == (
        before_get + 1
    )
    assert _sample("rest_client_response_size_bytes_sum", verb="GET", host=host) > before_bytes
    assert _sample("rest_client_rate_limiter_duration_seconds_count", verb="POST", host=host) >= 3


@pytest.mark.unit
def test_a_client_with_its_own_rate_limit_shares_all_but_the_bucket() -> None:
    access = ClusterAccess(host="https://127.0.0.1:1")
    api = KubeClient(access, rate_limiter=TokenBucket(20, 30))
    fence = lambda: True  # noqa: E731 - a stand-in lease check
    api.write_fence = fence
    try:
        twin = api.with_own_rate_limit()
        assert twin.rate_limiter is not None and api.rate_limiter is not None
        assert twin.rate_limiter is not api.rate_limiter
        assert (twin.rate_limiter.qps, twin.rate_limiter.burst) == (20, 30)
        assert twin.write_fence is fence and twin.access is api.access
        # Draining one bucket leaves the other full.
        for _ in range(30):
            assert api.rate_limiter.reserve() == 0.0
        assert api.rate_limiter.reserve() > 0.0
        assert twin.rate_limiter.reserve() == 0.0
        unlimited = KubeClient(access).with_own_rate_limit()
        assert unlimited.rate_limiter is None
    finally:
        api.close()
