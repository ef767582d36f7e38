"""Client-side rate limits of API requests: client-go's token bucket (``--kube-api-qps``,
``--kube-api-burst``) and the ``rest_client_*`` metrics named as client-go names them.

kube-controller-manager gives each controller's client a bucket of ``burst`` tokens that
refills at ``qps`` tokens a second (``--kube-api-qps`` 20, ``--kube-api-burst`` 30 by
default) and every request, a watch included, takes one token before it is sent. Steward's
clients do the same with the same flag names (:func:`add_rate_limit_arguments`), so a
figure against upstream compares like with like.

# Behaviour
:meth:`TokenBucket.wait` reserves a token and sleeps until it is due: callers are served in
the order they asked, and a burst of ``burst`` requests after a quiet spell is not delayed
at all. ``qps <= 0`` means no limit (``TokenBucket.unlimited``); ``burst`` must then be
ignored, otherwise it must be at least 1 (:class:`ValueError`).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Histogram

DEFAULT_QPS = 20.0
"""kube-controller-manager's ``--kube-api-qps`` default."""
DEFAULT_BURST = 30
"""kube-controller-manager's ``--kube-api-burst`` default."""

_LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
_SIZE_BUCKETS = tuple(float(64 * 4**i) for i in range(9))  # 64 B … 4 MiB, as client-go

REQUESTS = Counter(
    "rest_client_requests",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
)
REQUEST_DURATION = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=_LATENCY_BUCKETS,
)
RATE_LIMITER_DURATION = Histogram(
    "rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=_LATENCY_BUCKETS,
)
REQUEST_SIZE = Histogram(
    "rest_client_request_size_bytes",
    "Request size in bytes. Broken down by verb and host.",
    ["verb", "host"],
    buckets=_SIZE_BUCKETS,
)
RESPONSE_SIZE = Histogram(
    "rest_client_response_size_bytes",
    "Response size in bytes. Broken down by verb and host.",
    ["verb", "host"],
    buckets=_SIZE_BUCKETS,
)


class TokenBucket:
    """``qps`` tokens a second into a bucket of ``burst``, full at the start; thread-safe.

    ``now`` and ``sleep`` default to :func:`time.monotonic` and :func:`time.sleep` (tests
    pass a fake clock).

    Raises:
        ValueError: ``qps > 0`` and ``burst < 1``.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"a burst of at least 1 is needed with a qps above 0, not {burst}")
        self.qps = qps
        self.burst = burst
        self._now = now
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = now()

    @property
    def unlimited(self) -> bool:
        """True when ``qps <= 0``: :meth:`wait` never waits."""
        return self.qps <= 0

    def reserve(self) -> float:
        """Take one token, going into debt when none is left; return the seconds the
        caller must wait before it may send (0 when a token was there)."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._now()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            # (a nanosecond's worth of float error is no debt)
            return 0.0 if self._tokens > -1e-9 else -self._tokens / self.qps

    def give_back(self) -> None:
        """Return the token of the last :meth:`reserve` (its caller will not send)."""
        if self.qps <= 0:
            return
        with self._lock:
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    def wait(self) -> float:
        """Block until a token is this caller's; return the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay


def add_rate_limit_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--kube-api-qps`` and ``--kube-api-burst``, as kube-controller-manager has them."""
    parser.add_argument(
        "--kube-api-qps",
        type=float,
        default=DEFAULT_QPS,
        help="QPS to use while talking with kubernetes apiserver: requests a second this "
        "process's API client may send on average, as kube-controller-manager's flag of the "
        "same name; 0 or less means no limit (default %(default)s)",
    )
    parser.add_argument(
        "--kube-api-burst",
        type=int,
        default=DEFAULT_BURST,
        help="Burst to use while talking with kubernetes apiserver: requests sent at once "
        "before --kube-api-qps paces them (default %(default)s)",
    )


def bucket_from_args(
    args: argparse.Namespace, scale: tuple[float, float] = (1.0, 1.0)
) -> TokenBucket:
    """The bucket of the parsed ``--kube-api-qps``/``--kube-api-burst``, each multiplied
    by ``scale`` (a controller upstream gives a client with more: see
    ``ControllerOptions.rate_limit_scale``).

    Raises:
        ValueError: ``--kube-api-burst`` is below 1 while ``--kube-api-qps`` is above 0;
            the message names the flags.
    """
    if args.kube_api_qps > 0 and args.kube_api_burst < 1:
        raise ValueError(
            f"--kube-api-burst must be at least 1 when --kube-api-qps is above 0, "
            f"not {args.kube_api_burst}"
        )
    return TokenBucket(args.kube_api_qps * scale[0], int(args.kube_api_burst * scale[1]))


_Children = tuple[Any, Any, Any]
_children: dict[tuple[str, str], _Children] = {}
"""The per-(verb, host) series of the histograms: ``labels()`` costs more than the
observation itself, and a process talks to one host with a handful of verbs."""


def observe(
    verb: str, host: str, status: int, started: float, sent: bytes | None, answer: bytes
) -> None:
    """Count one answered request in the ``rest_client_*`` metrics (``started`` is the
    :func:`time.monotonic` reading just before it was sent)."""
    series = _children.get((verb, host))
    if series is None:
        series = _children[(verb, host)] = (
            REQUEST_DURATION.labels(verb, host),
            REQUEST_SIZE.labels(verb, host),
            RESPONSE_SIZE.labels(verb, host),
        )
    REQUESTS.labels(str(status), verb, host).inc()
    series[0].observe(time.monotonic() - started)
    series[1].observe(len(sent) if sent else 0)
    series[2].observe(len(answer))
