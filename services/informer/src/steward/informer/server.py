"""The ``steward informer`` process: the gRPC server, health, reflection, metrics, shutdown.

# Shutdown
On SIGTERM or SIGINT the health service turns NOT_SERVING, every Watch stream ends
cleanly (status OK; clients resume with their last resource version), the server stops
with a grace period for unary calls in flight, then the reflectors stop.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass

from steward.flowcontrol import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    TokenBucket,
    add_rate_limit_arguments,
    bucket_from_args,
)
from steward.informer.apiclient import ApiClient
from steward.informer.fanout import Fanout
from steward.informer.metrics import InformerMetrics
from steward.informer.reflector import ReflectorOptions, Reflectors
from steward.informer.service import (
    DEFAULT_MAX_SELECTOR_LENGTH,
    DEFAULT_MAX_STREAMS_PER_PEER,
    InformerService,
    ServiceOptions,
    add_to_server,
)
from steward.kube import ClusterAccess, KubeClient, load_access
from steward.serving import host
from steward.serving.security import Guard, add_serving_arguments, serving_from_args
from steward.v1 import informer_pb2

log = logging.getLogger(__name__)

SERVICE_NAME: str = informer_pb2.DESCRIPTOR.services_by_name["InformerService"].full_name
DEFAULT_LISTEN = "127.0.0.1:50061"
DEFAULT_WATCH_LINGER = 0.005
"""Seconds an idle Watch stream waits after new events (``--watch-linger``): in the Job
benchmark at high limits, 3 ms cut Steward's CPU per Job by about 14 % and 10 ms by about
25 % (fewer, larger responses to every subscriber), for as much added delivery delay."""
MAX_WATCH_LINGER = 1.0
"""The longest ``--watch-linger`` accepted: longer would hold events back noticeably."""


@dataclass
class InformerOptions(host.HostOptions):
    """How to run the informer: the host's options (kubeconfig, probes, metrics, shutdown
    grace, security) and the informer's own. Every field has a working default."""

    listen: str = DEFAULT_LISTEN
    """gRPC address (host:port; port 0 picks a free one). Defaults to 127.0.0.1:50061."""
    history_size: int = 10_000
    """Recent events kept per type to serve resumes. Defaults to 10,000."""
    subscriber_buffer: int = 10_000
    """Objects queued per subscriber and type before REPLACED. Defaults to 10,000."""
    idle_grace: float = 30.0
    """Seconds a type nobody watches keeps being watched. Defaults to 30."""
    max_batch_size: int = 256
    """Default events per WatchResponse. Defaults to 256."""
    watch_linger: float = DEFAULT_WATCH_LINGER
    """Seconds an idle Watch stream waits after new events before it sends them, so that
    events close together share one response (each response costs its subscriber about
    0.1 ms of CPU); 0 sends at once. Defaults to 0.005."""
    max_selector_length: int = DEFAULT_MAX_SELECTOR_LENGTH
    """Longest label or field selector a request may carry (characters). Defaults to 4096."""
    max_watch_streams_per_peer: int = DEFAULT_MAX_STREAMS_PER_PEER
    """Watch streams one caller (its identity, else its connection) may hold open at once.
    Defaults to 100."""
    kube_api_qps: float = DEFAULT_QPS
    """Requests a second the LIST & WATCH client may send on average (client-go's token
    bucket; 0 or less: no limit). Defaults to 20, kube-controller-manager's default."""
    kube_api_burst: int = DEFAULT_BURST
    """Requests the LIST & WATCH client may send at once. Defaults to 30."""


class InformerServer(host.HostedService):
    """The informer's servers and caches; :meth:`run` blocks until cancelled or signalled.

    :meth:`start` and :meth:`stop` are also usable alone (tests run it in-process).
    """

    def __init__(self, options: InformerOptions, access: ClusterAccess | None = None) -> None:
        self.options = options
        self.access = access if access is not None else load_access(options.kubeconfig)
        self.metrics = InformerMetrics()
        self.client = ApiClient(
            self.access, rate_limiter=TokenBucket(options.kube_api_qps, options.kube_api_burst)
        )
        self.host = host.ServiceHost(
            SERVICE_NAME,
            options,
            self.metrics.registry,
            server_options=[("grpc.max_send_message_length", 64 * 1024 * 1024)],
        )
        self.reviewer = (
            KubeClient(self.access, user_agent="steward-informer-auth")
            if options.security.authorization == "RBAC"
            else None
        )
        self.guard = Guard(options.security, self.reviewer)
        self.fanout = Fanout()
        self.reflectors = Reflectors(
            self.client,
            self.fanout,
            self.metrics,
            ReflectorOptions(history_size=options.history_size, idle_grace=options.idle_grace),
        )
        self.metrics.register_gauges(
            self.fanout.lags,
            lambda: [(r.name, len(r.store)) for r in self.reflectors],
            self.fanout.counts,
        )
        self.service = InformerService(
            self.client,
            self.reflectors,
            self.fanout,
            self.metrics,
            ServiceOptions(
                subscriber_buffer=options.subscriber_buffer,
                default_batch=options.max_batch_size,
                watch_linger=options.watch_linger,
                max_selector_length=options.max_selector_length,
                max_streams_per_peer=options.max_watch_streams_per_peer,
            ),
            self.guard,
        )

    async def start(self) -> int:
        """Bind and start serving; returns the gRPC port.

        Raises:
            RuntimeError: the address cannot be bound.
        """
        await self.host.start(lambda server: add_to_server(self.service, server))
        log.info(
            "informer serving on %s:%d (%s, authorization %s; API server %s)",
            self.host.listen_host,
            self.port,
            "mTLS" if self.options.security.tls else "PLAINTEXT",
            self.options.security.authorization,
            self.access.host,
        )
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING, end Watch streams cleanly, stop the server, then the caches."""
        await self.host.begin_shutdown()
        self.fanout.close_all()
        await self.host.stop(grace)
        await self.reflectors.stop_all()
        self.client.close()
        if self.reviewer is not None:
            self.reviewer.close()


# Command line ------------------------------------------------------------------------------
DESCRIPTION = """\
Run the informer: the only List & Watch client of the Kubernetes API server in a Steward
installation. It keeps one reflector (paginated LIST, then WATCH with bookmarks) per
resource type any subscriber asked for, caches the objects as the API server's JSON, and
serves them over gRPC (steward.v1.InformerService: Watch, List, Get), with the standard
health service and server reflection (try: grpcurl -cacert ca.crt -cert client.crt
-key client.key 127.0.0.1:50061 list).

Every caller is authenticated (client certificate or bearer token) and may Watch, List
and Get only what its own identity may list, watch and get in the API server
(SubjectAccessReview; long streams are re-checked and end PERMISSION_DENIED when the
permission goes).

A subscriber that falls behind has its pending events coalesced per object; past
--subscriber-buffer it gets REPLACED and a fresh snapshot. SIGTERM or SIGINT: health turns
NOT_SERVING, streams end cleanly, and the server stops.
"""

EPILOG = """\
environment (flags win):
  STEWARD_INFORMER_LISTEN                      --listen
  KUBECONFIG                                   --kubeconfig (in-cluster config is used in a pod)
  STEWARD_INFORMER_METRICS_LISTEN              --metrics-listen
  STEWARD_INFORMER_HISTORY_SIZE                --history-size
  STEWARD_INFORMER_SUBSCRIBER_BUFFER           --subscriber-buffer
  STEWARD_INFORMER_IDLE_GRACE                  --idle-grace
  STEWARD_INFORMER_WATCH_LINGER                --watch-linger
  STEWARD_INFORMER_MAX_SELECTOR_LENGTH         --max-selector-length
  STEWARD_INFORMER_MAX_WATCH_STREAMS_PER_PEER  --max-watch-streams-per-peer
  STEWARD_INFORMER_TLS_CERT_FILE, _TLS_KEY_FILE, _CLIENT_CA_FILE, _INSECURE_PLAINTEXT,
  _AUTHORIZATION_MODE, _TOKEN_AUDIENCE, _AUTH_CACHE_TTL, _AUTH_RECHECK_INTERVAL
                                               the security flags of the same names
  OTEL_EXPORTER_OTLP_ENDPOINT                  send a span per received event and per call
                                               there (OTLP gRPC)
  STEWARD_GC_THRESHOLD                         the garbage collector's young threshold
                                               (default 50000; 0: CPython's own settings)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``steward informer`` flags, with defaults from the environment."""
    env = os.environ.get
    host.add_listen_argument(parser, "STEWARD_INFORMER_LISTEN", DEFAULT_LISTEN)
    host.add_kubeconfig_argument(parser)
    host.add_endpoint_arguments(parser, "STEWARD_INFORMER", ready="serving")
    host.add_count_argument(
        parser,
        "--history-size",
        "STEWARD_INFORMER_HISTORY_SIZE",
        10000,
        "recent events kept per resource type to serve resumes (default: %(default)s)",
    )
    host.add_count_argument(
        parser,
        "--subscriber-buffer",
        "STEWARD_INFORMER_SUBSCRIBER_BUFFER",
        10000,
        "objects queued per subscriber and type before it is sent REPLACED and a "
        "fresh snapshot (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-grace",
        type=float,
        default=float(env("STEWARD_INFORMER_IDLE_GRACE", "30")),
        help="seconds a resource type nobody watches any more keeps being watched "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--watch-linger",
        type=float,
        default=float(env("STEWARD_INFORMER_WATCH_LINGER", str(DEFAULT_WATCH_LINGER))),
        help="seconds a Watch stream that had nothing to send waits after new events "
        "before it sends them, so that events close together share one response (each "
        "response costs the subscriber a wake-up); 0 sends at once (default: %(default)s)",
    )
    host.add_count_argument(
        parser,
        "--max-selector-length",
        "STEWARD_INFORMER_MAX_SELECTOR_LENGTH",
        DEFAULT_MAX_SELECTOR_LENGTH,
        "longest label or field selector a Watch or List may carry, in characters; "
        "a longer one is refused with INVALID_ARGUMENT (default: %(default)s)",
    )
    host.add_count_argument(
        parser,
        "--max-watch-streams-per-peer",
        "STEWARD_INFORMER_MAX_WATCH_STREAMS_PER_PEER",
        DEFAULT_MAX_STREAMS_PER_PEER,
        "Watch streams one caller (its identity; with AlwaysAllow, its connection) may hold "
        "open at once; one more is refused with RESOURCE_EXHAUSTED (one Watch can name "
        "several types) (default: %(default)s)",
    )
    add_rate_limit_arguments(parser)
    add_serving_arguments(parser, "STEWARD_INFORMER")


def options_from_args(args: argparse.Namespace) -> InformerOptions:
    """Check the flags and build the options.

    Raises:
        ValueError: a flag is out of range or malformed; the message names it.
    """
    host.check_counts(
        args,
        "--history-size",
        "--subscriber-buffer",
        "--max-selector-length",
        "--max-watch-streams-per-peer",
    )
    bucket_from_args(args)  # a burst below 1 with a qps above 0 is refused here
    if args.idle_grace < 0:
        raise ValueError(f"--idle-grace must not be negative, got {args.idle_grace}")
    if not 0 <= args.watch_linger <= MAX_WATCH_LINGER:
        raise ValueError(
            f"--watch-linger must be between 0 and {MAX_WATCH_LINGER:g} seconds, "
            f"got {args.watch_linger}"
        )
    host.check_addresses(args)
    return InformerOptions(
        listen=args.listen,
        kubeconfig=args.kubeconfig,
        metrics_listen=args.metrics_listen,
        health_listen=args.health_listen,
        history_size=args.history_size,
        subscriber_buffer=args.subscriber_buffer,
        idle_grace=args.idle_grace,
        watch_linger=args.watch_linger,
        max_selector_length=args.max_selector_length,
        max_watch_streams_per_peer=args.max_watch_streams_per_peer,
        security=serving_from_args(args),
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
    )


def main(args: argparse.Namespace) -> int:
    """Run the informer until signalled: 0 on a clean stop, 2 for bad flags, 1 when it
    cannot start (no API server configuration, address in use); errors go to stderr."""
    return host.run_service("informer", args, options_from_args, InformerServer)


def main_cli() -> None:
    """The ``steward-informer`` console script (also ``python -m steward.informer``)."""
    host.main_cli("informer", DESCRIPTION, EPILOG, add_arguments, main)
