"""Steward's services in the cluster: informer, manager and controllers, run by its supervisor."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import grpc

from steward.cluster.config import ClusterConfig
from steward.cluster.controller_manager import CLUSTER_FLAGS
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress
from steward.cluster.registry import (
    RegisteredController,
    enabled,
    steward_controllers,
    upstream_runs,
)
from steward.cluster.startup import failure, launch, poll
from steward.cluster.state import ClusterState
from steward.cluster.supervisor import ServiceSpec, ServiceStatus, read_spec, write_spec

SUPERVISOR = "supervisor"
"""The component that runs Steward's services (see :mod:`steward.cluster.supervisor`)."""

SUPERVISOR_STOP_GRACE = 60.0
"""Seconds ``down`` gives the supervisor to stop its services (each has 10 s) and exit
before it is killed; whatever it left running is then stopped by ``down`` itself."""


def start(state: ClusterState, config: ClusterConfig, out: Progress) -> None:
    """The supervisor, then through it Steward's informer and manager (own logs,
    restarted when they exit), each waited on until its gRPC health service says
    SERVING; then Steward's controllers, all started first, then each waited on until
    the manager made it active. A controller takes objects without
    ``spec.managedBy`` only when upstream's controller of its name is off. Each runs
    as its own identity (:data:`~steward.cluster.identities.STEWARD_IDENTITIES`), not
    as admin."""
    st = state
    timeout = config.start_timeout
    registry = steward_controllers()  # imports every controller: once
    launch(
        st,
        SUPERVISOR,
        [
            sys.executable,
            "-m",
            "steward.cluster.supervisor",
            f"--state-dir={st.directory}",
            *config.restart_backoff.args(),
            *(["--die-with-parent"] if config.die_with_parent else []),
        ],
        config,
    )
    cli = [sys.executable, "-m", "steward.cli"]
    limits = [
        f"--kube-api-qps={config.kube_api_qps:g}",
        f"--kube-api-burst={config.kube_api_burst}",
    ]

    def kubeconfig(component: str) -> str:
        return f"--kubeconfig={st.component_kubeconfig(component)}"

    services = {
        "informer": [
            *cli,
            "informer",
            kubeconfig("informer"),
            f"--listen={st.informer_address}",
            *limits,
            *st.steward_serving_args(),
        ],
        "manager": [
            *cli,
            "manager",
            kubeconfig("manager"),
            f"--listen={st.manager_address}",
            *manager_controllers(config.controllers, registry),
            *st.steward_serving_args(),
        ],
    }
    for name, argv in services.items():
        _supervise(st, name, argv, timeout, traced=config.steward_tracing)
        _wait_serving(st, name, timeout, out)
    started: list[str] = []
    for registered in registry:
        name = registered.name
        upstream = upstream_runs(st.controllers, name)
        if upstream and registered.beside_upstream is None:
            continue  # two controllers would fight over each object
        if config.steward_controllers is not None and name not in config.steward_controllers:
            continue
        if not registered.enabled_by_default and not enabled(config.controllers, name, False):
            continue  # off unless named, as upstream's controller of that name
        argv = [
            sys.executable,
            *registered.launch,
            kubeconfig(f"controller-{name}"),
            f"--informer={st.informer_address}",
            f"--manager={st.manager_address}",
            *st.client_args(f"controller-{name}"),
            *cluster_files(st, registered.flags),
            *(
                [f"--cluster-signing-duration={config.cluster_signing_duration}"]
                if config.cluster_signing_duration
                and "--cluster-signing-duration" in registered.flags
                else []
            ),
            *limits,
            *shared_flags((*CLUSTER_FLAGS, *config.kcm_flags), registered.flags),
            *((registered.beside_upstream or ()) if upstream else registered.alone),
            # Started again after a crash, a controller finds the lease of its dead
            # process still running (up to 15 s): it waits for it as a standby instead
            # of exiting 1 again and again, its restarts backing off ever longer.
            "--standby",
        ]
        _supervise(st, f"{name}-controller", argv, timeout, traced=config.steward_tracing)
        started.append(name)
    # Started together (each one's start-up is mostly its own imports), waited on in turn.
    for name in started:
        _wait_active(st, f"{name}-controller", name, timeout, out)


def _supervise(
    state: ClusterState, name: str, argv: list[str], timeout: float, *, traced: bool
) -> None:
    """Add service ``name`` to the supervisor's spec and wait until it runs it; its
    first process is recorded in :attr:`ClusterState.processes`, so that the waits for
    its health fail as soon as it exits."""
    env = _tracing_env(state, {}, traced)
    specs = [s for s in read_spec(state.directory) if s.name != name]
    write_spec(state.directory, [*specs, ServiceSpec(name, argv, str(state.log(name)), env)])
    supervisor = state.process(SUPERVISOR)
    started = time.monotonic()
    while True:
        service = state.services().get(name)
        if service is not None and service.process is not None:
            state.processes.append(service.process)
            state.save()
            return
        if service is not None and service.last_exit:
            raise failure(state, name, f"exited during start-up ({service.last_exit})")
        if not supervisor.alive():
            raise failure(state, SUPERVISOR, f"exited before it started {name}")
        if time.monotonic() - started > timeout:
            raise failure(state, SUPERVISOR, f"did not start {name} in {timeout:.0f}s")
        time.sleep(0.05)


def _tracing_env(state: ClusterState, env: dict[str, str], traced: bool) -> dict[str, str]:
    """``env`` (a service's own variables) with its spans exported to this cluster's
    Jaeger (``traced``) or not at all. A user's own ``OTEL_EXPORTER_OTLP_ENDPOINT``
    is left to be inherited when traced, and blanked (no export) when not."""
    env = dict(env)
    key = "OTEL_EXPORTER_OTLP_ENDPOINT"
    env.pop(key, None)
    if traced and key not in os.environ:
        env[key] = state.otlp_endpoint
    elif not traced and key in os.environ:
        env[key] = ""
    return env


def set_tracing(state: ClusterState, traced: bool, *, timeout: float, out: Progress) -> list[str]:
    """Export the spans of Steward's services to this cluster's Jaeger, or stop
    exporting them (``ClusterConfig.steward_tracing`` of a running cluster): each
    service whose setting differs is replaced by the supervisor (stopped, then started
    again with the new environment; not counted as a restart), then waited on as
    ``up`` waits (the informer and the manager until their gRPC health says SERVING,
    the controllers until the manager names them active). Returns the names of the
    services replaced.

    Raises:
        ClusterError: the cluster runs none of Steward's services, or one did not come
            back within ``timeout`` seconds.
    """
    st = state
    specs = read_spec(st.directory)
    if not specs:
        raise ClusterError(f"cluster {st.name!r} runs none of Steward's services")
    wanted = [ServiceSpec(s.name, s.argv, s.log, _tracing_env(st, s.env, traced)) for s in specs]
    changed = [new.name for new, old in zip(wanted, specs, strict=True) if new != old]
    if not changed:
        return []
    before = {n: s.process.pid for n, s in st.services().items() if s.process is not None}
    out.say(f"tracing {'on' if traced else 'off'}: replacing {', '.join(changed)}")
    write_spec(st.directory, wanted)

    def replaced(name: str, now: dict[str, ServiceStatus]) -> bool:
        service = now.get(name)
        return bool(service and service.process and service.process.pid != before.get(name))

    started = time.monotonic()
    while True:
        now = st.services()
        if all(replaced(n, now) for n in changed):
            break
        if time.monotonic() - started > timeout:
            raise failure(st, SUPERVISOR, f"did not replace {', '.join(changed)}")
        time.sleep(0.05)
    st.refresh_services()
    st.save()
    for name in changed:
        if name in ("informer", "manager"):
            _wait_serving(st, name, timeout, out)
    pids = {r.name: r.pid for r in st.processes}
    for name in changed:
        if name.endswith("-controller"):
            controller = name.removesuffix("-controller")
            _wait_active(st, name, controller, timeout, out, pid=pids[name])
    return changed


def _wait_serving(state: ClusterState, name: str, timeout: float, out: Progress) -> None:
    """Wait until the gRPC health service of ``name`` (``informer`` or ``manager``)
    says SERVING."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

    address = state.informer_address if name == "informer" else state.manager_address
    with state.client_security().sync_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        def serving() -> bool:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
            except grpc.RpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

        where = f"gRPC health at {address}"
        poll(state, name, where, serving, timeout=timeout, out=out, interval=0.2, done="serving")


def _wait_active(
    state: ClusterState, name: str, controller: str, timeout: float, out: Progress, *, pid: int = 0
) -> None:
    """Wait until the manager names an instance of ``controller`` as its holder (with
    ``pid``: the instance of that process, whose id names it)."""
    from steward.v1 import manager_pb2, manager_pb2_grpc

    address = state.manager_address
    with state.client_security().sync_channel(address) as channel:
        stub = manager_pb2_grpc.ManagerServiceStub(channel)

        def active() -> bool:
            try:
                reply = stub.GetController(
                    manager_pb2.GetControllerRequest(name=controller), timeout=1.0
                )
            except grpc.RpcError:
                return False  # not registered yet
            holder = reply.controller.holder
            return bool(holder and (not pid or f"-{pid}-" in holder))

        where = f"active at the manager {address}"
        poll(state, name, where, active, timeout=timeout, out=out, interval=0.2, done="active")


def cluster_files(state: ClusterState, flags: frozenset[str]) -> list[str]:
    """The cluster's files for the flags a controller declares, as kube-controller-manager
    is given them (controller_manager.py): the CA bundle (``--root-ca-file``), the
    service-account signing key (``--service-account-private-key-file``) and the CA that
    signs CertificateSigningRequests (``--cluster-signing-cert-file`` and
    ``--cluster-signing-key-file``). A controller gets only those it declares, so the
    keys reach only the controllers that sign with them."""
    pki = state.directory / "pki"
    files = {
        "--root-ca-file": pki / "ca.crt",
        "--service-account-private-key-file": pki / "sa.key",
        "--cluster-signing-cert-file": pki / "ca.crt",
        "--cluster-signing-key-file": pki / "ca.key",
    }
    return [f"{flag}={path}" for flag, path in files.items() if flag in flags]


def shared_flags(kcm_flags: Sequence[str], flags: frozenset[str]) -> list[str]:
    """The flags of kube-controller-manager's ``kcm_flags`` that a Steward controller
    declares too (``flags``, its option strings): a cluster configured with
    ``--terminated-pod-gc-threshold=100`` gets that threshold from upstream's pod GC and
    from Steward's alike. Flags are matched by name, so give their values after ``=``."""
    return [flag for flag in kcm_flags if flag.split("=", 1)[0] in flags]


def manager_controllers(
    controllers: str, registry: Sequence[RegisteredController] | None = None
) -> list[str]:
    """The manager's ``--controllers`` for the local control plane's ``controllers``:
    none (its default ``*``) unless they name controllers that ``*`` leaves off
    (``*,bootstrapsigner``), which the manager must then let run."""
    named = [
        name
        for registered in (registry if registry is not None else steward_controllers())
        if not registered.enabled_by_default
        and enabled(controllers, name := registered.name, False)
    ]
    return [f"--controllers={','.join(['*', *named])}"] if named else []
