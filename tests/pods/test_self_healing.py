"""Steward as pods heals itself: chaos on a real node during a steady burst of work.

Each case disrupts a running cluster while a thread keeps creating Jobs and scaling and
rolling Deployments on kwok's nodes (:class:`tests.pods.chaos.Burst` over
:class:`tests.faults.workload.Workload`, one namespace per case), then waits, polling,
until the workload has converged (:meth:`Workload.problems` is empty), every registered
Steward controller is ACTIVE at the manager, and every Steward component has as many
Ready pods as before the case. The cases:

- ``pods-<component>``: force-delete all pods of one component (each controller, the
  informer, the manager): ``kubectl delete pods -A -l app.kubernetes.io/name=<x>
  --grace-period=0 --force``;
- ``pods-all``: force-delete every Steward pod at once;
- ``node-runtime``: restart the real node's containerd and kubelet;
- ``sigkill-all``: SIGKILL every Steward process in the real node's cgroup at once;
- ``apiserver-down``: stop kube-apiserver for 30 s;
- ``kcm-sigkill`` (upstream only): SIGKILL kube-controller-manager and start it again
  with the same command line, as a kubelet restarts a static pod.

Steward's pods are selected in every namespace by ``app.kubernetes.io/name``, so the
cases hold for Deployments in ``steward`` as for the kubelet's static pods in
``kube-system``. Each case prints one line (``-s``), also recorded as the test's
``chaos`` property: the seconds from the disruption until the workload converged, the
controllers were active and the pods were back, and what brought them back (derived
from the pods' UIDs, owners, container ids and restart counts, and the manager's lease
holders).

Two environment variables choose what runs:

``STEWARD_CHAOS``
    ``quick`` (the default, what ``make test`` runs): the ReplicaSet controller's pods,
    all pods at once, and SIGKILL of every Steward process. ``full``: every case.
``STEWARD_CHAOS_SIDES``
    ``steward`` (the default), or ``steward,upstream``: also the cases that apply
    (``node-runtime``, ``apiserver-down``, ``kcm-sigkill``) on a cluster where
    upstream's kube-controller-manager runs every controller, held to the same end
    state. The two sides' clusters run one after the other, never together.

Needs root and the real nodes' Debian packages (``make node-packages``); without them
it skips, except in CI, where it fails.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.progress import Progress
from steward.cluster.registry import controller_names, steward_controllers
from steward.kube import KubeClient, NotFoundError, load_access
from steward.manager.enablement import UPSTREAM_DISABLED_BY_DEFAULT
from tests.conftest import require_real_nodes
from tests.faults.stack import restart_component
from tests.faults.workload import Workload
from tests.pods import chaos
from tests.pods.conftest import is_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODE = os.environ.get("STEWARD_CHAOS") or "quick"
SIDES = tuple(
    s.strip() for s in (os.environ.get("STEWARD_CHAOS_SIDES") or "steward").split(",") if s.strip()
)
if MODE not in ("quick", "full"):
    raise ValueError(f"STEWARD_CHAOS={MODE!r}: quick or full")
if not SIDES or set(SIDES) - {"steward", "upstream"}:
    raise ValueError(f"STEWARD_CHAOS_SIDES={','.join(SIDES)!r}: steward, upstream or both")

CONVERGE_WITHIN = 240.0
"""Seconds a case may take from the disruption to recovery."""
BURST_FOR = 15.0
"""The burst goes on at least this long after the disruption began (and until it ends)."""
HEALTHY_WITHIN = 180.0
"""Seconds the cluster may take to be whole before a case begins."""
APISERVER_DOWN = 30.0


# ----------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    id: str
    sides: tuple[str, ...]
    quick: bool
    disrupt: Callable[[LocalCluster, list[str]], str]
    """Does the damage (on the test's main thread: components it starts again die with
    the thread that started them); returns what it did, for the report."""


def _delete_component(app: str) -> Callable[[LocalCluster, list[str]], str]:
    def disrupt(cluster: LocalCluster, apps: list[str]) -> str:
        count = chaos.force_delete(cluster, f"{chaos.APP_LABEL}={app}")
        return f"force-deleted {count} pod(s) of {app}"

    return disrupt


def _delete_all(cluster: LocalCluster, apps: list[str]) -> str:
    count = chaos.force_delete(cluster, f"{chaos.APP_LABEL} in ({','.join(apps)})")
    return f"force-deleted {count} Steward pods at once"


def _restart_node_runtime(cluster: LocalCluster, apps: list[str]) -> str:
    node = cluster.state.real_nodes[0].name
    took = restart_component(cluster, chaos.process_name(cluster, f"containerd-{node}"))
    took += restart_component(cluster, chaos.process_name(cluster, f"kubelet-{node}"))
    return f"restarted containerd and kubelet of {node} ({took:.1f}s)"


def _sigkill_all(cluster: LocalCluster, apps: list[str]) -> str:
    return f"SIGKILLed {chaos.sigkill_steward(cluster)} Steward processes on the node"


def _apiserver_down(cluster: LocalCluster, apps: list[str]) -> str:
    name = chaos.process_name(cluster, "kube-apiserver")
    took = restart_component(cluster, name, down_for=APISERVER_DOWN)
    return f"stopped kube-apiserver for {APISERVER_DOWN:.0f}s (ready again after {took:.1f}s)"


def _kcm_sigkill(cluster: LocalCluster, apps: list[str]) -> str:
    chaos.sigkill_and_start(cluster, chaos.process_name(cluster, "kube-controller-manager"))
    return "SIGKILLed kube-controller-manager and started it again"


def all_cases() -> list[Case]:
    # Names from the distributions' metadata: collection imports no controller.
    per_component = [
        Case(
            f"pods-{app.removeprefix('steward-')}",
            ("steward",),
            app == "steward-controller-replicaset",
            _delete_component(app),
        )
        for app in chaos.components(
            [n for n in controller_names() if n not in UPSTREAM_DISABLED_BY_DEFAULT]
        )
    ]
    return [
        *per_component,
        Case("pods-all", ("steward",), True, _delete_all),
        Case("node-runtime", ("steward", "upstream"), False, _restart_node_runtime),
        Case("sigkill-all", ("steward",), True, _sigkill_all),
        Case("apiserver-down", ("steward", "upstream"), False, _apiserver_down),
        Case("kcm-sigkill", ("upstream",), False, _kcm_sigkill),
    ]


CASES = {c.id: c for c in all_cases()}
SELECTED = [
    pytest.param(side, case.id, id=f"{side}-{case.id}")
    for side in SIDES
    for case in CASES.values()
    if side in case.sides and (MODE == "full" or case.quick)
]


# ----------------------------------------------------------------------------- fixtures


@dataclass
class Chaos:
    """One side's cluster and what a case compares against."""

    side: str
    cluster: LocalCluster
    admin: KubeClient
    controllers: list[str]
    """Steward's registered controllers (none on the upstream side)."""
    apps: list[str]
    """Steward's components (values of ``app.kubernetes.io/name``)."""
    baseline: dict[str, int]
    """Ready pods of each component once the cluster was up."""


class Sides:
    """The cluster of one side at a time: asked for the other side, it tears the running
    one down first (only one real-node cluster may run on the machine); the tests come
    grouped by side, so each side's cluster starts once. The Steward side is the
    package's pods-mode cluster (``tests/pods/conftest.py``, which ``test_pods.py`` used
    first), the upstream side a cluster of its own."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.current: Chaos | None = None
        self.failed: dict[str, str] = {}

    def get(self, name: str, request: pytest.FixtureRequest) -> Chaos:
        if self.current is not None and self.current.side == name:
            return self.current
        self.close()
        if name in self.failed:
            pytest.fail(f"the {name} cluster did not start: {self.failed[name]}")
        try:
            if name == "steward":
                self.current = self._begin(name, request.getfixturevalue("pods_cluster"))
            else:
                self.current = self._begin(name, self._up(name))
        except Exception as err:
            self.failed[name] = f"{type(err).__name__}: {err}"
            raise
        return self.current

    def _up(self, name: str) -> LocalCluster:
        cfg = ClusterConfig(
            name=f"steward-test-chaos-{name}-{os.getpid()}",
            state_dir=self.tmp_path_factory.mktemp(f"chaos-{name}-cluster"),
            nodes=3,
            real_nodes=1,
            die_with_parent=True,
        )
        started = time.monotonic()
        cluster = LocalCluster.up(cfg, progress=Progress(interval=15.0))
        print(f"\nchaos: the {name} cluster is up in {time.monotonic() - started:.1f}s")
        return cluster

    def _begin(self, name: str, cluster: LocalCluster) -> Chaos:
        steward_side = name == "steward"
        admin = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="chaos-test")
        env = Chaos(name, cluster, admin, [], [], {})
        self.current = env  # torn down by close() whatever follows
        if steward_side:
            # Those off by default (bootstrapsigner, tokencleaner) are not deployed.
            env.controllers = [c.name for c in steward_controllers() if c.enabled_by_default]
            env.apps = chaos.components(env.controllers)
            # ``up`` waits for the controllers it hands over; the baseline is taken once
            # every registered one is active, so that no pod still starting is left out.
            up_at = time.monotonic()
            waited: list[str] = []
            while inactive := chaos.inactive(chaos.controller_states(cluster), env.controllers):
                waited = waited or inactive
                assert time.monotonic() < up_at + HEALTHY_WITHIN, f"not active: {inactive}"
                time.sleep(0.5)
            if waited:
                print(
                    f"chaos: every controller active {time.monotonic() - up_at:.1f}s after "
                    f"the cluster was up (at first: {', '.join(waited)})"
                )
            env.baseline = chaos.ready_counts(chaos.steward_pods(cluster, env.apps))
            missing = [a for a in env.apps if not env.baseline.get(a)]
            assert not missing, f"components without a Ready pod after the start: {missing}"
        return env

    def close(self, *, shared_too: bool = True) -> None:
        """Take the current side's cluster down; the package's cluster only when
        ``shared_too`` (to make room for the upstream side's), else it is left to the
        package (``test_teardown.py``)."""
        env, self.current = self.current, None
        if env is None:
            return
        env.admin.close()
        if is_up(env.cluster) and (shared_too or env.side != "steward"):
            env.cluster.down(progress=Progress(quiet=True))


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sides]:
    require_real_nodes()
    running = Sides(tmp_path_factory)
    try:
        yield running
    finally:
        running.close(shared_too=False)


# ----------------------------------------------------------------------------- helpers


def whole(env: Chaos) -> list[str]:
    """What keeps the cluster from being whole: controllers not ACTIVE, components short
    of Ready pods (empty on the upstream side, which has neither)."""
    if env.side != "steward":
        return []
    out = chaos.inactive(chaos.controller_states(env.cluster), env.controllers)
    out += chaos.pods_short_of(env.baseline, chaos.steward_pods(env.cluster, env.apps))
    return out


def new_namespace(admin: KubeClient, case: str) -> str:
    ns = f"chaos-{case}-{uuid.uuid4().hex[:5]}"[:60]
    admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            return ns
        except NotFoundError:
            if time.monotonic() > deadline:
                pytest.fail(f"no default ServiceAccount in {ns} after 60s")
            time.sleep(0.25)


@dataclass
class Recovery:
    """When each part of the cluster was last seen coming back, in seconds from the
    disruption: the start of the stretch it has held since (None while it does not)."""

    env: Chaos
    since: float
    workload: float | None = None
    controllers: float | None = None
    pods: float | None = None
    finished: float | None = None
    """When the workload's last change was made (its convergence cannot come earlier)."""
    broken: tuple[str, ...] = ()

    def observe(self, workload: Workload | None) -> bool:
        """Look once (the workload only once it is given: after its last change); True
        when every part holds."""
        now = time.monotonic() - self.since
        broken: list[str] = []
        if workload is not None:
            problems = workload.problems()
            self.workload = None if problems else (self.workload if self.workload else now)
            broken += problems[:30]
        if self.env.side == "steward":
            states = chaos.controller_states(self.env.cluster)
            inactive = chaos.inactive(states, self.env.controllers)
            self.controllers = None if inactive else (self.controllers or now)
            try:
                pods = chaos.steward_pods(self.env.cluster, self.env.apps)
                short = chaos.pods_short_of(self.env.baseline, pods)
            except Exception as err:  # the API server may be coming back
                short = [f"Steward's pods not listed: {err}"]
            self.pods = None if short else (self.pods or now)
            broken = [*inactive, *short, *broken]
        self.broken = tuple(broken)
        return workload is not None and not broken

    def text(self) -> str:
        def s(v: float | None) -> str:
            return "never" if v is None else f"{v:.1f}s"

        parts = [f"workload {s(self.workload)}"]
        if self.workload is not None and self.finished is not None:
            parts[0] += f" = {self.workload - self.finished:.1f}s after its last change"
        if self.env.side == "steward":
            parts += [f"controllers {s(self.controllers)}", f"pods {s(self.pods)}"]
        return ", ".join(parts)


def recover(recovery: Recovery, workload: Workload) -> float:
    """Poll until the workload has converged and the cluster is whole again; fail naming
    what still differs. Returns the seconds from the disruption."""
    deadline = recovery.since + CONVERGE_WITHIN
    while not recovery.observe(workload):
        if time.monotonic() > deadline:
            pytest.fail(
                f"not recovered {CONVERGE_WITHIN:.0f}s after the disruption "
                f"({recovery.text()}):\n  " + "\n  ".join(recovery.broken)
            )
        time.sleep(0.5)
    return time.monotonic() - recovery.since


# ------------------------------------------------------------------------------- the test


@pytest.mark.parametrize(("side", "case"), SELECTED)
def test_recovers_during_a_burst(
    sides: Sides,
    side: str,
    case: str,
    request: pytest.FixtureRequest,
    record_property: Callable[[str, Any], None],
) -> None:
    env, spec = sides.get(side, request), CASES[case]
    cluster = env.cluster

    # The cluster must be whole before the case: an earlier case may have broken it.
    deadline = time.monotonic() + HEALTHY_WITHIN
    while broken := whole(env):
        if time.monotonic() > deadline:
            pytest.fail(
                "not whole before the case (an earlier case left it so?):\n  " + "\n  ".join(broken)
            )
        time.sleep(1.0)

    ns = new_namespace(env.admin, case)
    workload = Workload(env.admin, ns)
    workload.begin()
    pods_before = chaos.steward_pods(cluster, env.apps) if env.apps else []
    holders_before = chaos.controller_states(cluster) if env.controllers else {}
    processes_before = {p.name: p.pid for p in cluster.state.processes}

    burst = chaos.Burst(workload).start()
    started = time.monotonic()
    recovery = Recovery(env, started)
    try:
        did = spec.disrupt(cluster, env.apps)
        # The burst goes on over the disruption's aftermath; meanwhile, watch the
        # controllers and Steward's pods come back.
        while time.monotonic() - started < BURST_FOR:
            recovery.observe(None)
            time.sleep(0.5)
    finally:
        burst.stop()
    chaos.wait_apiserver(cluster)
    workload.finish()
    recovery.finished = time.monotonic() - started

    seconds = recover(recovery, workload)

    restarted = sorted(
        p.name for p in cluster.state.processes if processes_before.get(p.name) != p.pid
    )
    how = f"started again by the test: {', '.join(restarted) or 'nothing'}; "
    if env.side == "steward":
        how += chaos.attribute(pods_before, chaos.steward_pods(cluster, env.apps))
        how += "; " + chaos.holders_moved(holders_before, chaos.controller_states(cluster))
    else:
        kcm = "a new" if "kube-controller-manager" in restarted else "the same"
        how += f"{kcm} kube-controller-manager process converged the workload"
    line = (
        f"chaos {env.side}/{case}: {did}; whole again after {seconds:.1f}s ({recovery.text()}); "
        f"burst of {burst.changes} changes ({burst.errors} retried); recovered by: {how}"
    )
    print("\n" + line)
    record_property("chaos", line)
    env.admin.request("DELETE", f"/api/v1/namespaces/{ns}")
