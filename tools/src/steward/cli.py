"""The ``steward`` command line: build, cluster, informer, manager and controllers commands.

Every command explains itself with ``--help``. Errors print one clear message on standard
error and exit with status 1 (2 for usage errors); progress goes to standard error, and
results (paths, JSON, shell lines) to standard output so they can be captured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from steward.cluster import ClusterConfig, LocalCluster, binaries
from steward.cluster.errors import ClusterError, NotUpError
from steward.cluster.state import state_root
from steward.logs import add_logging_flags
from steward.security import (
    ClientSecurity,
    SecurityConfigError,
    add_client_arguments,
    client_from_args,
)
from steward.version import add_version_flag

_EPILOG = """\
environment:
  STEWARD_STATE_DIR   where named clusters keep their state
                      (default ~/.local/state/steward/clusters)
  STEWARD_CACHE_DIR   where built binaries are cached (default ~/.cache/steward)
  KUBEBUILDER_ASSETS  directory with pre-built kube-apiserver/etcd to use instead of building
"""


def _add_cluster_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        default="default",
        help="cluster name; its state lives in $STEWARD_STATE_DIR/<name> (default: %(default)s)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="explicit state directory, instead of one derived from --name",
    )


def _config(args: argparse.Namespace) -> ClusterConfig:
    return ClusterConfig(name=args.name, state_dir=args.state_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="steward",
        description="Steward: the Kubernetes controller manager as gRPC microservices.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    build = sub.add_parser(
        "build",
        help="build the pinned Go binaries of the local control plane (cached)",
        description=(
            "Build kube-apiserver, kube-controller-manager, kube-scheduler (v1.37.2), etcd, "
            "kwok, metrics-server and Jaeger, and the real nodes' kubelet, kube-proxy, "
            "CoreDNS and pause, from the Go modules under deploy/tools/ into the per-version "
            "cache. Kubernetes' "
            "e2e suite (e2e.test, ginkgo, agnhost) is built only when named (make e2e does). "
            "Binaries already cached are not rebuilt. Shows progress and duration."
        ),
    )
    build.add_argument(
        "binaries",
        nargs="*",
        metavar="BINARY",
        help=f"build only these (of: {', '.join(binaries.TOOLS)})",
    )

    cluster = sub.add_parser(
        "cluster",
        help="run a real local Kubernetes control plane on loopback",
        description=(
            "A real local control plane: etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler, kwok (simulated nodes) and Jaeger, on 127.0.0.1 with free ports "
            "and fresh PKI."
        ),
    )
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = csub.add_parser(
        "up",
        help="start a cluster and wait until it is ready",
        description=(
            "Build what is missing, start every component, create the simulated nodes and "
            "wait until all are Ready. Prints the kubeconfig path when done, and before it, "
            "on standard error, what to try: commands that work as printed, in any shell."
        ),
    )
    _add_cluster_target(up)
    up.add_argument(
        "--nodes", type=int, default=3, help="number of simulated nodes (default: %(default)s)"
    )
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help=(
            "also start N real nodes (containerd, runc and a kubelet each, with kube-proxy "
            "and CoreDNS) beside the simulated ones; needs root and Debian's runc, "
            "containerd and containernetworking-plugins (default: %(default)s)"
        ),
    )
    up.add_argument(
        "--steward-pods",
        action="store_true",
        help=(
            "deploy Steward as pods on the real nodes: its core (informer, manager, "
            "ReplicaSet and Deployment controllers) as the first real node's static pods, "
            "the other controllers as the local overlay's Deployments (images built "
            "without a daemon and imported into the nodes); needs --real-nodes 1 or more "
            "(make up PODS=1 does)"
        ),
    )
    up.add_argument(
        "--controllers",
        default="*",
        help=(
            "kube-controller-manager --controllers, e.g. '*,-job' to leave the Job "
            "controller to Steward; with --steward, '*' switches off upstream's "
            "controllers that Steward runs, and '*,bootstrapsigner,tokencleaner' also "
            "runs Steward's controllers that are off by default (default: %(default)s)"
        ),
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help=(
            "also run the resource metrics pipeline: kwok simulates pod and node usage, "
            "metrics-server serves it as metrics.k8s.io through the aggregation layer "
            "(make up does)"
        ),
    )
    up.add_argument(
        "--steward",
        action="store_true",
        help=(
            "also run Steward's informer, manager and controllers against the cluster, "
            "upstream's controllers of the same names off unless --controllers says "
            "otherwise; a supervisor process starts each again when it exits, after 10s "
            "doubling to 5m, reset after 10m of running (make up does)"
        ),
    )
    up.add_argument(
        "--apiserver-port",
        type=int,
        default=None,
        help="fixed kube-apiserver port (default: a free one)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds each component may take to become healthy (default: %(default)s)",
    )

    down = csub.add_parser(
        "down",
        help="stop the cluster's processes and remove its state",
        description="Stop exactly the processes the cluster started "
        "(SIGTERM, then SIGKILL after 10s) and remove its state directory.",
    )
    _add_cluster_target(down)

    status = csub.add_parser(
        "status",
        help="show components, restarts, ports and nodes",
        description="Show each component's pid, liveness and memory, the "
        "endpoints, and which nodes are Ready. Steward's services (started with --steward) "
        "also show how often the supervisor started them again and how they last exited. "
        "Exits 1 when a component is not running.",
    )
    _add_cluster_target(status)
    status.add_argument("--json", action="store_true", help="print JSON")

    tracing = csub.add_parser(
        "tracing",
        help="switch the export of Steward's spans to the cluster's Jaeger on or off",
        description="Replace Steward's services (the informer, the manager and the "
        "controllers) with their spans exported to the cluster's Jaeger (on) or not (off), "
        "and wait until each serves again or is active at the manager. A replacement is "
        "not counted as a restart. Clusters started with --steward trace from the start.",
    )
    _add_cluster_target(tracing)
    tracing.add_argument("state", choices=["on", "off"], help="export spans or not")

    kubeconfig = csub.add_parser(
        "kubeconfig",
        help="print the admin kubeconfig path",
        description="Print the path of the cluster-admin kubeconfig.",
    )
    _add_cluster_target(kubeconfig)

    env = csub.add_parser(
        "env",
        help="print shell exports for the cluster",
        description="Print `export` lines (KUBECONFIG, the OTLP endpoint, Jaeger's query "
        'URL); use as: eval "$(steward cluster env)".',
    )
    _add_cluster_target(env)

    from steward.informer import server as informer_server

    informer = sub.add_parser(
        "informer",
        help="run the informer service (List & Watch cache, gRPC Watch/List/Get)",
        description=informer_server.DESCRIPTION,
        epilog=informer_server.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_logging_flags(informer)
    informer_server.add_arguments(informer)

    from steward.manager import server as manager_server

    manager = sub.add_parser(
        "manager",
        help="run the manager service (controller registry, lifecycle, --controllers)",
        description=manager_server.DESCRIPTION,
        epilog=manager_server.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_logging_flags(manager)
    manager_server.add_arguments(manager)

    controllers = sub.add_parser(
        "controllers",
        help="show the manager's controllers: state, instances, queue, reconciles/s, errors",
        description="Ask the manager (ListControllers) for every known controller and print "
        "a table: name, state, active instance, standbys, queue depth, reconciles per "
        "second and last error. Without --manager and the security flags (or their "
        "STEWARD_* variables) it dials the local cluster's manager (`make up`; --name or "
        "--state-dir pick another) with the cluster admin's client certificate, as "
        "`steward cluster env` exports them; each flag or variable given overrides.",
    )
    controllers.add_argument(
        "--manager",
        default=None,
        help="the manager's gRPC address, host:port (default: $STEWARD_MANAGER_ADDRESS, "
        "else the local cluster's)",
    )
    controllers.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")
    _add_cluster_target(controllers)
    add_client_arguments(controllers)
    controllers.add_argument("--json", action="store_true", help="print JSON")
    trace_cmd = sub.add_parser(
        "trace",
        help="print the trace of an object's cause from Jaeger as a waterfall, list the later ones",
        description=(
            "Find an object's traces through the informer's event spans in Jaeger (query "
            "API) and print the trace of its cause, the one holding the informer's ADDED "
            "event of the object: what wrote it, the reconciles it caused, their API writes "
            "with kube-apiserver's own spans, and the events of the objects they created. "
            "It is drawn as a waterfall (every span with its offset, duration and a bar) "
            "followed by its Jaeger link. Then the object's later traces, one line each: "
            "start (UTC), trace ID, spans, services and outcome (ok, with any reconcile "
            "result other than success; or error and the first span with an error status). "
            "When no trace holds the ADDED event (the informer found the object in its "
            "first LIST rather than watched it arrive, or Jaeger dropped that trace), the "
            "earliest trace of the object stands in, with a note on stderr. Of an object "
            "deleted and created again under its name, the story is the newest one's; the "
            "earlier one's traces are listed apart."
        ),
    )
    trace_cmd.add_argument("object", metavar="KIND/NAME", help="e.g. job/pi or configmap/x")
    trace_cmd.add_argument("-n", "--namespace", default="default", help="(default: default)")
    trace_cmd.add_argument(
        "--jaeger",
        default=None,
        help="Jaeger query URL (default: $STEWARD_JAEGER_QUERY_URL, else the local cluster's)",
    )
    which = trace_cmd.add_mutually_exclusive_group()
    which.add_argument(
        "--latest", action="store_true", help="print the object's newest trace instead"
    )
    which.add_argument(
        "--trace",
        metavar="ID",
        help="print the trace of this ID instead (the list of later traces shows theirs); "
        "exit status 1 when Jaeger has no such trace; one with no event of the object is "
        "printed all the same, with a note on stderr",
    )
    trace_cmd.add_argument(
        "--limit",
        type=int,
        default=20,
        metavar="N",
        help="how many of the object's newest traces to ask Jaeger for (default: %(default)s)",
    )
    _add_cluster_target(trace_cmd)
    from steward import deploy

    deploy.register(sub)
    return parser


def _cmd_trace(args: argparse.Namespace) -> int:
    from steward import traces

    kind, sep, name = args.object.partition("/")
    if not sep or not kind or not name:
        print("steward trace: error: give the object as KIND/NAME, e.g. job/pi", file=sys.stderr)
        return 2
    if args.trace is not None and not (
        0 < len(args.trace) <= 32 and all(c in "0123456789abcdefABCDEF" for c in args.trace)
    ):
        print(f"steward trace: error: {args.trace!r} is not a trace ID (hex)", file=sys.stderr)
        return 2
    if args.limit < 1:
        print("steward trace: error: --limit must be at least 1", file=sys.stderr)
        return 2
    jaeger = args.jaeger or os.environ.get("STEWARD_JAEGER_QUERY_URL")
    if not jaeger:
        jaeger = LocalCluster.find(_config(args)).jaeger_query_url
    obj = traces.ObjectRef(kind, args.namespace, name)
    where = f"{args.object} in namespace {args.namespace}"
    try:
        if args.trace is not None:
            one = traces.get_trace(jaeger, args.trace)
            if one is None:
                print(f"steward trace: no trace {args.trace} in {jaeger}", file=sys.stderr)
                return 1
            if not traces.concerns(one, obj):
                print(
                    f"steward trace: note: trace {args.trace} has no event of {where}",
                    file=sys.stderr,
                )
            print(traces.render(jaeger, one))
            return 0
        found = traces.find_traces(jaeger, kind, args.namespace, name, limit=args.limit)
        added = (
            []
            if args.latest
            else traces.find_traces(
                jaeger, kind, args.namespace, name, limit=args.limit, event_type="ADDED"
            )
        )
    except traces.TraceError as err:
        print(f"steward trace: error: {err}", file=sys.stderr)
        return 1
    story = traces.select_story(found + added, obj)
    if story is None:
        print(
            f"steward trace: no trace of {where} in {jaeger} (are the services exporting to "
            "it? OTEL_EXPORTER_OTLP_ENDPOINT)",
            file=sys.stderr,
        )
        return 1
    if args.latest:
        newest = max(found + added, key=traces.trace_start)
        print(traces.render(jaeger, newest))
        return 0
    if story.note:
        print(f"steward trace: note: {story.note}", file=sys.stderr)
    # Jaeger's limit keeps the traces it received last, which need not be the newest
    # by start time: a full answer may leave later traces out, even all of them.
    truncated = (
        f"only the newest {args.limit} were asked for, see --limit"
        if len(found) >= args.limit
        else ""
    )
    print(traces.render_story(jaeger, story, more="print one with --trace ID", truncated=truncated))
    return 0


_STATES = {
    "CONTROLLER_STATE_ACTIVE": "active",
    "CONTROLLER_STATE_LAPSING": "lapsing",
    "CONTROLLER_STATE_WAITING": "waiting",
    "CONTROLLER_STATE_DRAINING": "draining",
    "CONTROLLER_STATE_DISABLED": "disabled",
}


_CREDENTIAL_FLAGS = ("tls_ca_file", "tls_cert_file", "tls_key_file", "token_file")


def _local_cluster(args: argparse.Namespace, *, instead: str) -> LocalCluster:
    """The local cluster of ``--name``/``--state-dir``, which a client command dials when
    not told where and as whom; ``instead`` names what would do without it.

    Raises:
        NotUpError: no cluster state there; the message says how to start one.
    """
    config = _config(args)
    try:
        return LocalCluster.find(config)
    except NotUpError:
        where = (
            f"in {config.directory()}"
            if args.state_dir is not None
            else f"{args.name!r} (no state in {config.directory()})"
        )
        raise NotUpError(
            f"no local cluster {where}: start one with `make up` (or `steward cluster "
            f"up --steward`), pick a running one with --name or --state-dir, or give {instead}"
        ) from None


def _manager_client(args: argparse.Namespace) -> tuple[str, ClientSecurity]:
    """Where the manager is and how to dial it: ``--manager`` (else
    ``$STEWARD_MANAGER_ADDRESS``) and the security flags (else ``$STEWARD_TLS_*``, ...)
    when given; what is not given comes from the local cluster, as ``steward cluster env``
    exports it: its manager's address, its CA and the admin's client certificate. The
    credentials come all from the flags or all from the cluster, never some of each.

    Raises:
        NotUpError: something is missing and there is no local cluster to take it from.
        ClusterError: the local cluster runs no manager, or its manager has stopped.
        SecurityConfigError: the credentials given are incomplete or unreadable.
    """
    address = args.manager or os.environ.get("STEWARD_MANAGER_ADDRESS")
    explicit = args.insecure_plaintext or any(getattr(args, f) for f in _CREDENTIAL_FLAGS)
    if address and explicit:
        return address, client_from_args(args)
    cluster = _local_cluster(
        args,
        instead="--manager and --tls-ca-file, --tls-cert-file and --tls-key-file (or "
        "STEWARD_MANAGER_ADDRESS and STEWARD_TLS_CA_FILE, STEWARD_TLS_CERT_FILE and "
        "STEWARD_TLS_KEY_FILE)",
    )
    if not address:
        name = f"cluster {cluster.state.name!r} ({cluster.directory})"
        cluster.state.refresh_services()  # the supervisor's current process of each
        manager = next((p for p in cluster.state.processes if p.name == "manager"), None)
        if manager is None:
            raise ClusterError(
                f"{name} runs no Steward manager of its own (`make up` starts one: "
                "`steward cluster up --steward`); give --manager to dial another"
            )
        if not manager.alive():
            raise ClusterError(
                f"the manager of {name} is not running (log: {manager.log}); "
                "`steward cluster status` shows its restarts and last exit"
            )
        address = cluster.state.manager_address
    if explicit:
        return address, client_from_args(args)
    security = cluster.client_security()  # the admin, system:masters
    if args.tls_server_name:
        security = dataclasses.replace(security, server_name=args.tls_server_name)
    security.credentials()  # fail now with the file's name
    return address, security


def _cmd_controllers(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf import json_format

    from steward.v1 import manager_pb2, manager_pb2_grpc

    try:
        address, security = _manager_client(args)
    except SecurityConfigError as err:
        print(f"steward: error: {err}", file=sys.stderr)
        return 2
    try:
        with security.sync_channel(address) as channel:
            response = manager_pb2_grpc.ManagerServiceStub(channel).ListControllers(
                manager_pb2.ListControllersRequest(), timeout=args.timeout
            )
    except grpc.RpcError as err:
        code = err.code() if isinstance(err, grpc.Call) else None
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        name = code.name if code is not None else "error"
        print(f"steward: error: manager at {address}: {name}: {details}", file=sys.stderr)
        return 1
    if args.json:
        print(json_format.MessageToJson(response))
        return 0
    rows = [("NAME", "STATE", "ACTIVE", "STANDBYS", "QUEUE", "RECONCILES/S", "LAST ERROR")]
    for c in response.controllers:
        state = _STATES.get(manager_pb2.ControllerState.Name(c.state), "?")
        active = [i for i in c.instances if i.role == manager_pb2.ROLE_ACTIVE]
        standbys = [i.instance_id for i in c.instances if i.role == manager_pb2.ROLE_STANDBY]
        holder = c.holder or "-"
        if c.holder:
            holder += f" (epoch {c.epoch})"
        queue = str(active[0].status.queue_depth) if active else "-"
        rate = f"{c.reconciles_per_second:.1f}" if active else "-"
        error = (active[0].status.last_error if active else "") or "-"
        error = " ".join(error.split())
        if len(error) > 60:
            error = error[:57] + "..."
        rows.append((c.name, state, holder, ",".join(standbys) or "-", queue, rate, error))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())
    return 0


@dataclass(frozen=True)
class Hint:
    """One line of what ``steward cluster up`` prints when done: a label, then either a
    shell command that works as printed, in any shell (absolute paths, no environment
    needed), or a note."""

    label: str
    command: str = ""
    """The command, empty for a note."""
    note: str = ""
    """Said after the command as a shell comment, or the whole line of a note."""

    @property
    def text(self) -> str:
        """What follows the label: the command and its note (``# ...``), or the note."""
        if not self.command:
            return self.note
        return f"{self.command}  # {self.note}" if self.note else self.command


def _executable(name: str) -> str:
    """``name`` by the absolute path it has beside this Python (the environment's bin
    directory, which a new shell may not have on its PATH), else by name alone."""
    path = Path(sys.executable).parent / name
    return shlex.quote(str(path)) if path.exists() else name


def cluster_flags(cluster: LocalCluster) -> list[str]:
    """The ``--name``/``--state-dir`` flags that find ``cluster`` from a shell with a
    clean environment: none for the default cluster in the default state root, else
    ``--name`` in that root, else ``--state-dir``."""
    root = Path.home() / ".local" / "state" / "steward" / "clusters"
    directory = cluster.directory
    if directory == root / "default":
        return []
    if directory.parent == root:
        return ["--name", shlex.quote(directory.name)]
    return ["--state-dir", shlex.quote(str(directory))]


def up_hints(cluster: LocalCluster, *, steward_pods: bool = False) -> list[Hint]:
    """What to try on the running ``cluster``, as ``steward cluster up`` prints it: what
    the cluster runs (Steward's services, the metrics pipeline, real nodes) from its
    state; ``steward_pods`` when Steward was deployed as pods. Run in order, every command
    works as printed in a shell with a clean environment."""
    kubectl = f"{_executable('kubectl')} --kubeconfig {shlex.quote(str(cluster.kubeconfig))}"
    steward = _executable("steward")
    target = "".join(f" {flag}" for flag in cluster_flags(cluster))
    st = cluster.state
    running = {p.name for p in st.processes}
    hints = [
        Hint("kubeconfig", note=str(cluster.kubeconfig)),
        Hint("try", f"{kubectl} get nodes"),
        Hint("Jaeger UI", note=f"{st.jaeger_query_url}  (OTLP gRPC in: {st.otlp_endpoint})"),
    ]
    if "manager" in running:
        hints += [
            Hint(
                "informer",
                note=f"{st.informer_address}   manager: {st.manager_address}   "
                f"(mTLS: `{steward} cluster env{target}` exports the admin's files)",
            ),
            Hint("controllers", f"{steward} controllers{target}"),
        ]
    if st.real_nodes:
        hints.append(
            Hint(
                "real nodes",
                note=f"{', '.join(n.name for n in st.real_nodes)} "
                f"(containerd, runc, kubelet; kube-proxy and CoreDNS on {st.host})",
            )
        )
    if steward_pods:
        selector = "-l app.kubernetes.io/part-of=steward"
        hints.append(
            Hint(
                "Steward",
                f"{kubectl} get pods -A {selector} -o wide",
                "as pods: the core static in kube-system",
            )
        )
    if "manager" in running or steward_pods:
        hints += [
            Hint("trace a Job", f"{kubectl} create job pi --image=busybox -- true"),
            Hint(
                "then",
                f"{steward} trace job/pi{target}",
                "its spans reach Jaeger within seconds",
            ),
        ]
    if "metrics-server" in running:
        # Usage shows for running pods only (and a node's is its pods'): run some first.
        rollout = "rolled out by Steward's controllers" if "manager" in running else ""
        hints += [
            Hint("deploy", f"{kubectl} create deployment web --image=nginx --replicas=2", rollout),
            Hint(
                "metrics",
                f"{kubectl} top pods",
                "once scraped (every 10 s); a pod's usage: its annotations "
                "steward.io/cpu-usage and steward.io/memory-usage",
            ),
        ]
    hints.append(Hint("stop with", f"{steward} cluster down{target}"))
    return hints


def render_hints(hints: Sequence[Hint]) -> str:
    """The hints as printed: one line each, the label padded to one column."""
    width = max(len(h.label) for h in hints) + 2
    return "\n".join(f"{h.label + ':':<{width}}{h.text}" for h in hints)


def _cmd_cluster(args: argparse.Namespace) -> int:
    if args.action == "up":
        if args.nodes < 0:
            raise ClusterError("--nodes must be 0 or more")
        if args.real_nodes < 0:
            raise ClusterError("--real-nodes must be 0 or more")
        config = ClusterConfig(
            name=args.name,
            state_dir=args.state_dir,
            nodes=args.nodes,
            real_nodes=args.real_nodes,
            steward_pods=args.steward_pods,
            controllers=args.controllers,
            apiserver_port=args.apiserver_port,
            start_timeout=args.timeout,
            steward=args.steward,
            metrics=args.metrics,
        )
        cluster = LocalCluster.up(config)
        hints = up_hints(cluster, steward_pods=config.steward_pods)
        print("\n" + render_hints(hints), file=sys.stderr)
        print(cluster.kubeconfig)
        return 0
    cluster = LocalCluster.find(_config(args))
    if args.action == "down":
        cluster.down()
    elif args.action == "kubeconfig":
        print(cluster.kubeconfig)
    elif args.action == "tracing":
        replaced = cluster.set_steward_tracing(args.state == "on")
        done = f"replaced {', '.join(replaced)}" if replaced else "already so, nothing replaced"
        print(f"tracing {args.state}: {done}")
    elif args.action == "env":
        values = {
            "KUBECONFIG": str(cluster.kubeconfig),
            "STEWARD_CLUSTER_DIR": str(cluster.directory),
            "OTEL_EXPORTER_OTLP_ENDPOINT": cluster.otlp_endpoint,
            "STEWARD_JAEGER_QUERY_URL": cluster.jaeger_query_url,
        }
        names = {p.name for p in cluster.state.processes}
        if "informer" in names:
            values["STEWARD_INFORMER"] = cluster.state.informer_address
        if "manager" in names:
            values["STEWARD_MANAGER"] = cluster.state.manager_address
            values["STEWARD_MANAGER_ADDRESS"] = cluster.state.manager_address
        if names & {"informer", "manager"}:
            # mTLS to Steward's services as the cluster's admin (system:masters).
            admin = cluster.client_security()
            values["STEWARD_TLS_CA_FILE"] = str(admin.ca_file)
            values["STEWARD_TLS_CERT_FILE"] = str(admin.cert_file)
            values["STEWARD_TLS_KEY_FILE"] = str(admin.key_file)
        for key, value in values.items():
            print(f"export {key}={shlex.quote(value)}")
    elif args.action == "status":
        info = cluster.status()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _print_status(info)
        return 0 if all(c["alive"] for c in info["components"]) else 1
    return 0


def _print_status(info: dict[str, object]) -> None:
    print(f"cluster     {info['name']}  ({info['directory']})")
    print(f"server      {info['server']}")
    print(f"kubeconfig  {info['kubeconfig']}")
    print(f"jaeger      {info['jaeger_query_url']}  (OTLP gRPC {info['otlp_endpoint']})")
    print(f"started     {info['started_at']} in {info['startup_seconds']}s")
    components = info["components"]
    assert isinstance(components, list)
    total = 0
    width = max((len(comp["name"]) for comp in components), default=0)
    for comp in components:
        state = "running" if comp["alive"] else "NOT RUNNING"
        rss = comp["rss_bytes"] / 2**20
        total += comp["rss_bytes"]
        line = f"  {comp['name']:{width}} pid {comp['pid']:<8} {state:12} {rss:7.0f} MiB"
        if "restarts" in comp:  # one of Steward's services, run by the supervisor
            line += f"  restarts {comp['restarts']}"
            if comp["last_exit"]:
                line += f", last exit {comp['last_exit']} at {comp['last_exit_at']}"
            if comp["restart_at"]:
                line += f", starts again at {comp['restart_at']}"
        print(line)
    print(f"memory      {total / 2**20:.0f} MiB resident in all")
    nodes = info.get("nodes")
    if isinstance(nodes, dict):
        ready = sum(1 for ok in nodes.values() if ok)
        print(f"nodes       {ready}/{len(nodes)} Ready")
    else:
        print(f"nodes       unknown: {info.get('nodes_error')}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            return binaries.main_build(args.binaries)
        if args.command == "cluster":
            return _cmd_cluster(args)
        if args.command == "informer":
            from steward.informer import server as informer_server

            return informer_server.main(args)
        if args.command == "manager":
            from steward.manager import server as manager_server

            return manager_server.main(args)
        if args.command == "controllers":
            return _cmd_controllers(args)
        if args.command == "trace":
            return _cmd_trace(args)
        if args.command == "deploy":
            from steward import deploy

            return deploy.main(args)
    except ClusterError as err:
        print(f"steward: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("steward: interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command}")
    return 2  # pragma: no cover - parser.error exits


__all__ = [
    "Hint",
    "build_parser",
    "cluster_flags",
    "main",
    "render_hints",
    "state_root",
    "up_hints",
]

if __name__ == "__main__":
    sys.exit(main())
