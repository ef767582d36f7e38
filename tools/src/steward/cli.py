"""The ``steward`` command line: build, cluster, informer, manager and controllers commands.

Every command explains itself with ``--help``. Errors print one clear message on standard
error and exit with status 1 (2 for usage errors); progress goes to standard error, and
results (paths, JSON, shell lines) to standard output so they can be captured.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from steward.cluster import binaries
from steward.cluster.control_plane import ClusterConfig, LocalCluster, state_root
from steward.cluster.errors import ClusterError
from steward.security import SecurityConfigError, add_client_arguments, client_from_args

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
            "wait until all are Ready. Prints the kubeconfig path when done."
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
            "deploy Steward as pods on the real nodes (the local overlay, images built "
            "without a daemon and imported into the nodes); needs --real-nodes 1 or more "
            "(make up PODS=1 does)"
        ),
    )
    up.add_argument(
        "--controllers",
        default="*",
        help=(
            "kube-controller-manager --controllers, e.g. '*,-job' to leave the Job "
            "controller to Steward (default: %(default)s)"
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
    informer_server.add_arguments(informer)

    from steward.manager import server as manager_server

    manager = sub.add_parser(
        "manager",
        help="run the manager service (controller registry, lifecycle, --controllers)",
        description=manager_server.DESCRIPTION,
        epilog=manager_server.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    manager_server.add_arguments(manager)

    controllers = sub.add_parser(
        "controllers",
        help="show the manager's controllers: state, instances, queue, reconciles/s, errors",
        description="Ask the manager (ListControllers) for every known controller and print "
        "a table: name, state, active instance, standbys, queue depth, reconciles per "
        "second and last error.",
    )
    controllers.add_argument(
        "--manager",
        default=os.environ.get("STEWARD_MANAGER_ADDRESS", "127.0.0.1:50062"),
        help="the manager's gRPC address, host:port (default: $STEWARD_MANAGER_ADDRESS or "
        "%(default)s)",
    )
    controllers.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")
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
    more = "print one with --trace ID"
    if len(found) >= args.limit:
        more += f"; only the newest {args.limit} were asked for, see --limit"
    print(traces.render_story(jaeger, story, more=more))
    return 0


_STATES = {
    "CONTROLLER_STATE_ACTIVE": "active",
    "CONTROLLER_STATE_LAPSING": "lapsing",
    "CONTROLLER_STATE_WAITING": "waiting",
    "CONTROLLER_STATE_DRAINING": "draining",
    "CONTROLLER_STATE_DISABLED": "disabled",
}


def _cmd_controllers(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf import json_format

    from steward.v1 import manager_pb2, manager_pb2_grpc

    try:
        security = client_from_args(args)
    except SecurityConfigError as err:
        print(f"steward: error: {err}", file=sys.stderr)
        return 2
    try:
        with security.sync_channel(args.manager) as channel:
            response = manager_pb2_grpc.ManagerServiceStub(channel).ListControllers(
                manager_pb2.ListControllersRequest(), timeout=args.timeout
            )
    except grpc.RpcError as err:
        code = err.code() if isinstance(err, grpc.Call) else None
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        name = code.name if code is not None else "error"
        print(f"steward: error: manager at {args.manager}: {name}: {details}", file=sys.stderr)
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
        kubectl = Path(sys.executable).parent / "kubectl"
        print(
            f"\nkubeconfig:  {cluster.kubeconfig}\n"
            f"try:         {kubectl if kubectl.exists() else 'kubectl'} "
            f"--kubeconfig {cluster.kubeconfig} get nodes\n"
            f"Jaeger UI:   {cluster.jaeger_query_url}  "
            f"(OTLP gRPC in: {cluster.otlp_endpoint})\n"
            + (
                f"informer:    {cluster.state.informer_address}   "
                f"manager: {cluster.state.manager_address}   "
                f"(try: steward controllers --manager {cluster.state.manager_address})\n"
                f"trace a Job: kubectl --kubeconfig {cluster.kubeconfig} create job pi "
                f"--image=busybox -- true; then: steward trace job/pi\n"
                if config.steward
                else ""
            )
            + (
                f"real nodes:  {', '.join(n.name for n in cluster.state.real_nodes)} "
                f"(containerd, runc, kubelet; kube-proxy and CoreDNS on {cluster.state.host})\n"
                if cluster.state.real_nodes
                else ""
            )
            + (
                f"Steward:     as pods, try: {kubectl if kubectl.exists() else 'kubectl'} "
                f"--kubeconfig {cluster.kubeconfig} -n steward get pods -o wide\n"
                f"trace a Job: kubectl --kubeconfig {cluster.kubeconfig} create job pi "
                f"--image=busybox -- true; then: steward trace job/pi\n"
                if config.steward_pods
                else ""
            )
            + (
                f"metrics:     {kubectl if kubectl.exists() else 'kubectl'} --kubeconfig "
                f"{cluster.kubeconfig} top pods -A (a pod's usage: its annotations "
                "steward.io/cpu-usage and steward.io/memory-usage)\n"
                if config.metrics
                else ""
            )
            + "stop with:   steward cluster down"
            + ("" if config.name == "default" else f" --name {config.name}"),
            file=sys.stderr,
        )
        print(cluster.kubeconfig)
        return 0
    cluster = LocalCluster.find(_config(args))
    if args.action == "down":
        cluster.down()
    elif args.action == "kubeconfig":
        print(cluster.kubeconfig)
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
    for comp in components:
        state = "running" if comp["alive"] else "NOT RUNNING"
        rss = comp["rss_bytes"] / 2**20
        total += comp["rss_bytes"]
        line = f"  {comp['name']:25} pid {comp['pid']:<8} {state:12} {rss:7.0f} MiB"
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


__all__ = ["build_parser", "main", "state_root"]

if __name__ == "__main__":
    sys.exit(main())
