"""``make e2e``: Kubernetes' own end-to-end specs against Steward's controllers.

For each side — ``steward`` (kube-controller-manager without the controllers Steward
replaces, Steward's informer, manager and controllers in their place) and ``upstream``
(kube-controller-manager with all of its own, the baseline) — a local control plane is
started with two real nodes (:data:`REAL_NODES`; conformance needs two) and no simulated
ones (the specs' pods must really run: kwok would complete every Job pod), untainted,
with the test images e2e names imported into their containerd
(:func:`steward.images.build_e2e_archive`). ``e2e.test``, built from the
same pinned ``k8s.io/kubernetes`` module as the control plane, runs the chosen specs
under ginkgo with ``--provider=local``; the JUnit report of each side is kept, and a
table per area says what passed, failed or could not run here (with the reason e2e
gave), Steward beside upstream. For a spec that failed under Steward the report adds the
lines of Steward's controller logs that name the spec's namespace.

A run passes only when every spec the selection names ran: before the cluster starts,
``e2e.test --ginkgo.dry-run`` with the same focus and skip says which specs will run
(:func:`dry_run`); a selected spec the report lists as skipped with no reason, or does not
list at all, never ran (``not run``: the run was interrupted, timed out, aborted, or a
ginkgo process died), and a non-zero exit of ginkgo is accepted only beside a failed spec
(:func:`read_run`). What breaks a run is kept in :attr:`Side.problems`.

The default selection is every ``[Conformance]`` spec of ``[sig-apps] Job``,
``Deployment``, ``ReplicaSet`` and ``Daemon set`` (:data:`CONFORMANCE`); ``--focus``/
``--skip`` choose others. ``[Serial]`` specs are left out by default except those of
:data:`SERIAL_AREAS` (every DaemonSet spec is one: a daemon pod runs on every node, so
other specs' pods must not come and go meanwhile); ginkgo runs serial specs one at a time
in its first process once the parallel ones are done. Each named selection
(:data:`SELECTIONS`) has a file listing its specs, one a line (:data:`SPEC_LISTS`), which
the tests require to pass, every one, and to equal what the pinned ``e2e.test`` selects;
``--list-specs`` prints a selection's specs and ``--write-specs`` refreshes its file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from steward.cluster import ClusterConfig, LocalCluster, binaries
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress

AREAS = ("Job", "Deployment", "ReplicaSet", "Daemon set")
"""The controllers Steward runs, as e2e names their areas (``[sig-apps] <area> ...``)."""

SERIAL_AREAS = ("Daemon set",)
"""Areas of :data:`AREAS` whose specs are all ``[Serial]`` and run by default all the same
(one at a time)."""

HPA_AREA = "HorizontalPodAutoscaler"
"""The area of ``[sig-autoscaling] [Feature:HPA]`` specs (they run Steward's HPA controller)."""

NETWORK_AREAS = ("EndpointSlice", "Services", "Service")
"""The ``[sig-network]`` areas whose specs exercise Steward's Endpoints and EndpointSlice
controllers (``Service endpoints latency`` is an area of its own)."""

APIMACHINERY_AREAS = ("Garbage collector", "Namespaces")
"""The ``[sig-api-machinery]`` areas whose specs exercise the garbage collector and the
namespace controller (``[sig-api-machinery] <area> ...``)."""

AUTH_AREAS = ("ServiceAccounts", "Certificates API")
"""The ``[sig-auth]`` areas whose specs exercise the service account, token, root CA
publisher and CertificateSigningRequest controllers (``[sig-auth] <area> ...``)."""

QUOTA_AREA = "ResourceQuota"
"""The ``[sig-api-machinery]`` area of the resource quota controller's specs."""

NODE_AREAS = ("NoExecuteTaintManager", "Pod garbage collector", "NodeLease")
"""The ``[sig-node]`` areas whose specs exercise the taint eviction, pod GC and node
lifecycle controllers (``[sig-node] <area> ...``)."""

WORKLOAD_AREAS = ("CronJob", "ReplicationController", "TTLAfterFinished", "DisruptionController")
"""The ``[sig-apps]`` areas of the CronJob, ReplicationController, TTL-after-finished and
disruption controllers (``[sig-apps] <area> ...``)."""

CONFORMANCE = (
    r"\[sig-apps\] (Job|Deployment|ReplicaSet|Daemon set) .*\[Conformance\]"
    r"|\[sig-network\] EndpointSlice .*\[Conformance\]"
    r"|\[sig-network\] Services should serve (a basic endpoint|multiport endpoints) from pods"
    r" \[Conformance\]"
)
"""Every conformance spec of those areas, of ``[sig-network] EndpointSlice``, and the two
Services conformance specs that serve a Service's endpoints (the quick ones: the whole of
``[sig-network]``'s is the ``network`` selection)."""

NETWORK = r"\[sig-network\] (EndpointSlice|Services?) "
"""Every spec of ``[sig-network] EndpointSlice``, ``Services`` and ``Service endpoints
latency`` (the trailing space leaves out ``EndpointSliceMirroring``)."""

NOT_HERE = (
    r"internalTrafficPolicy=Local|externalTrafficPolicy=Local"
    r"|HealthCheckNodePort correctly when ExternalTrafficPolicy changes"
    r"|session affinity timeout work"
)
"""``[sig-network]`` specs this environment cannot run, on either side: the real nodes
share the machine's network namespace and one kube-proxy, so traffic policy ``Local``
cannot tell them apart, and the HealthCheckNodePort spec needs three schedulable nodes;
the session affinity timeout specs can run, but take about 9 minutes of the run."""


def _none_of(texts: Sequence[str]) -> str:
    """An RE2 regexp (Go's regexp has no lookahead) for what follows where a text goes on
    with none of ``texts``: at each character shared by one of them, either a character
    that continues none, or that character followed by the same for the rest."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[""] = {}

    def branches(node: dict[str, Any]) -> str:
        chars = sorted(c for c in node if c)
        out = ["[^" + "".join(re.escape(c) for c in chars) + "]"]
        out += [re.escape(c) + "(?:" + branches(node[c]) + ")" for c in chars if "" not in node[c]]
        return "|".join(out)

    return "(?:" + branches(trie) + ")"


AUTOSCALING = (
    r"\[sig-autoscaling\] \[Feature:HPA\] Horizontal pod autoscaling "
    r"(\(scale resource: CPU\) (ReplicaSet light|CustomResourceDefinition) "
    r"|\(non-default behavior\) with (short downscale stabilization window|"
    r"autoscaling disabled shouldn't scale down))"
)
"""The ``[sig-autoscaling]`` HPA specs this machine can run beside a control plane and two
real nodes on two cores: the CPU ones whose pods together consume at most about 400m (a
ReplicaSet from 1 pod to 2 and from 2 to 1, a custom resource's scale subresource from 1
to 2, a downscale stabilization window of 1 minute, and a disabled scale-down held for
the default window). The others load up to 8 pods of 125 to 500m each, or need ``stress``
in the consumer image (memory), a feature gate, or external metrics; all are
``[Feature:HPA]``, so this selection does not skip ``[Feature:...]``."""

AUTOSCALING_SKIP = r"\[Disruptive\]|\[Flaky\]|\[FeatureGate:[^\]]+\]|\[Serial\]|\[Slow\]"

APIMACHINERY = r"\[sig-api-machinery\] (Garbage collector|Namespaces) "
"""Every spec of ``[sig-api-machinery] Garbage collector`` and ``Namespaces`` (the trailing
space leaves out ``OrderedNamespaceDeletion`` and any longer name). Every Namespaces spec
is ``[Serial]`` (a spec deletes namespaces by name prefix, or a hundred of them at once),
and so are the three Garbage collector specs whose ReplicationController has as many pods
as half the nodes' pod capacity (100 here); ginkgo runs them one at a time after the
others, so this selection does not skip ``[Serial]``."""

APIMACHINERY_SKIP = r"\[Disruptive\]|\[Flaky\]|\[Feature:[^\]]+\]|\[FeatureGate:[^\]]+\]"
"""Left out of :data:`APIMACHINERY`: the ``[Feature:ComprehensiveNamespaceDraining]``
spec (all of 100 namespaces gone in 150 s: the stricter twin of the 90 percent spec, which
upstream's jobs skip with every ``[Feature:...]`` and its source says is on hold)."""

AUTH = r"\[sig-auth\] (ServiceAccounts|Certificates API \[Privileged:ClusterAdmin\]) "
"""Every spec of ``[sig-auth] ServiceAccounts`` and ``Certificates API``: the default
``ServiceAccount`` and ``kube-root-ca.crt`` of each namespace, tokens mounted into pods,
and CertificateSigningRequests approved, signed and cleaned. (Upstream's e2e has no
ClusterRole aggregation spec; its bootstrap ``admin``/``edit``/``view`` roles, which the
aggregation controller fills, are what the framework binds in specs of other areas.)"""

AUTH_SKIP = r"\[Disruptive\]|\[Flaky\]|\[Feature:[^\]]+\]|\[FeatureGate:[^\]]+\]"
"""Left out of :data:`AUTH`: specs that need a feature or a feature gate."""

NODES = (
    r"\[sig-api-machinery\] ResourceQuota "
    r"|\[sig-node\] "
    r"(NoExecuteTaintManager (Single Pod|Multiple Pods)|Pod garbage collector|NodeLease) "
)
"""Every spec of ``[sig-api-machinery] ResourceQuota``, ``[sig-node] NoExecuteTaintManager``,
``Pod garbage collector`` and ``NodeLease``: quota usage counted and replenished, pods
evicted from nodes with NoExecute taints, a thousand failed pods collected down to the
threshold, and the kubelet's node Lease. The taint specs are ``[Serial]`` (they taint a
real node) and the pod GC one ``[Slow]`` and ``[Feature:PodGarbageCollector]``, which
needs kube-controller-manager's ``--terminated-pod-gc-threshold=100``
(:data:`NODES_KCM_FLAGS`), so this selection skips neither."""

NODES_SKIP = r"\[Disruptive\]|\[Flaky\]|\[FeatureGate:[^\]]+\]"
"""Left out of :data:`NODES`: specs that need a feature gate off by default."""

NODES_KCM_FLAGS = ("--terminated-pod-gc-threshold=100",)
"""The pod GC spec's setting, as upstream's job that runs it gives kube-controller-manager."""

WORKLOADS = r"\[sig-apps\] (" + "|".join(WORKLOAD_AREAS) + ") "
"""Every spec of ``[sig-apps] CronJob``, ``ReplicationController``, ``TTLAfterFinished``
and ``DisruptionController``: Jobs made on schedule (concurrency policies, suspend, history
limits, time zones, missed schedules), pods kept by a ReplicationController (adoption,
release, a quota's failure condition, scale), a finished Job deleted after its TTL, and
PodDisruptionBudgets' statuses and the evictions they allow or refuse. Two CronJob specs
are ``[Slow]`` (each watches a minute's schedule for several minutes); two
DisruptionController specs are ``[Serial]`` (run one at a time after the others)."""

WORKLOADS_SKIP = (
    r"\[Disruptive\]|\[Flaky\]|\[Feature:[^\]]+\]|\[FeatureGate:[^\]]+\]|\[Provider:[^\]]+\]"
)
"""Left out of :data:`WORKLOADS`: specs that need a feature gate or a cloud provider (the
ReplicationController's private image on GCE)."""


SERIAL_ELSEWHERE = (
    r"\[sig-" + _none_of([f"apps] {area} " for area in SERIAL_AREAS]) + r".*\[Serial\]"
)
"""The ``[Serial]`` specs outside :data:`SERIAL_AREAS`. ginkgo matches the suite's
description, a space and the spec's name (``[sig-<group>] <area> <text> [Serial]``, the
tags of the containers at the end), so this anchors on ``[sig-``."""

SKIP = r"\[Disruptive\]|\[Flaky\]|\[Feature:[^\]]+\]|\[FeatureGate:[^\]]+\]|" + SERIAL_ELSEWHERE
"""Specs left out by default: they break the cluster, are known flaky, need a feature
gate, or need the whole cluster (``[Serial]``) outside :data:`SERIAL_AREAS`."""

REAL_NODES = 2
"""Real nodes of each side's cluster: the conformance suite needs at least two (the
DaemonSet rollback spec checks, and fails on one)."""

SIDES = ("steward", "upstream")

TOOLS = ("e2e.test", "ginkgo", "agnhost", "resource-consumer", "consume-cpu", "pause")

SPEC_LISTS = Path(__file__).resolve().parents[3] / "tests" / "upstream_e2e" / "specs"
"""Where each selection's spec list is kept (``<name>.txt``), in this repository."""


@dataclass(frozen=True)
class Selection:
    """A named choice of e2e's specs: ginkgo's focus and skip, and the file listing the
    specs they select in the pinned ``e2e.test`` (:meth:`spec_list`)."""

    name: str
    focus: str
    skip: str
    about: str
    """What it selects, for the list's header and ``--help``."""
    kcm_flags: tuple[str, ...] = ()
    """kube-controller-manager's flags its clusters run with (e2e's own settings, as
    upstream's jobs give them); Steward's controllers that declare a flag get it too
    (:func:`steward.cluster.services.shared_flags`)."""
    metrics: bool = False
    """Its clusters run the resource metrics pipeline (metrics-server scraping the real
    kubelets) and their nodes get the resource consumer image
    (:func:`steward.images.build_consumer_archive`): the autoscaling specs need both."""

    def spec_list(self) -> Path:
        """The file naming every spec of the selection, one a line (the JUnit report's
        name without the leading ``[It] ``: the spec's text, then its labels)."""
        return SPEC_LISTS / f"{self.name}.txt"


SELECTIONS = {
    s.name: s
    for s in (
        Selection(
            "conformance",
            CONFORMANCE,
            SKIP,
            "every [Conformance] spec of [sig-apps] "
            + ", ".join(AREAS)
            + " and [sig-network] EndpointSlice, and the Services ones serving endpoints",
        ),
        Selection(
            "network",
            NETWORK,
            SKIP + "|" + NOT_HERE,
            "every spec of [sig-network] EndpointSlice, Services and Service endpoints "
            "latency that can run here",
        ),
        Selection(
            "autoscaling",
            AUTOSCALING,
            AUTOSCALING_SKIP,
            "the [sig-autoscaling] HPA specs on CPU that two cores can run: ReplicaSet light, "
            "a custom resource's scale, a short downscale window and a disabled scale-down",
            metrics=True,
        ),
        Selection(
            "apimachinery",
            APIMACHINERY,
            APIMACHINERY_SKIP,
            "every spec of [sig-api-machinery] Garbage collector and Namespaces, the [Serial] "
            "ones one at a time, but the [Feature:ComprehensiveNamespaceDraining] one (on "
            "hold upstream)",
        ),
        Selection(
            "auth",
            AUTH,
            AUTH_SKIP,
            "every spec of [sig-auth] ServiceAccounts and Certificates API but those that "
            "need a feature gate",
        ),
        Selection(
            "nodes",
            NODES,
            NODES_SKIP,
            "every spec of [sig-api-machinery] ResourceQuota and [sig-node] "
            "NoExecuteTaintManager, Pod garbage collector and NodeLease but those that need a "
            "feature gate, pod GC at a threshold of 100",
            kcm_flags=NODES_KCM_FLAGS,
        ),
        Selection(
            "workloads",
            WORKLOADS,
            WORKLOADS_SKIP,
            "every spec of [sig-apps] CronJob, ReplicationController, TTLAfterFinished and "
            "DisruptionController but those that need a feature gate or a cloud provider",
        ),
    )
}
"""The named selections (``--selection``), each with its spec list."""

DEFAULT_SELECTIONS = (
    "conformance",
    "network",
    "autoscaling",
    "apimachinery",
    "auth",
    "nodes",
    "workloads",
)
"""What ``make e2e`` runs, one after the other (a cluster per side for each)."""

PASSED, FAILED, NOT_RUNNABLE, NOT_RUN = "passed", "failed", "not runnable", "not run"


@dataclass
class Spec:
    """One spec's outcome."""

    name: str
    area: str
    state: str
    """``passed``, ``failed``, ``not runnable`` (skipped by e2e itself, with why) or ``not
    run`` (selected, but it never ran: the run broke before it)."""
    seconds: float
    message: str = ""
    namespaces: list[str] = field(default_factory=list)
    """A failed spec's namespaces: those its message names and those e2e destroyed for it
    (a timeout's message names none)."""
    logs: list[str] = field(default_factory=list)


@dataclass
class Side:
    """One side's run."""

    side: str
    specs: list[Spec]
    seconds: float
    junit: str
    cluster_seconds: float
    problems: list[str] = field(default_factory=list)
    """Why the run itself is broken (specs that never ran, a suite node that failed, an exit
    of ginkgo no failed spec explains); empty for a whole run."""


def area_of(name: str) -> str:
    """The area of a spec: one of :data:`AREAS`, :data:`APIMACHINERY_AREAS`,
    :data:`AUTH_AREAS`, :data:`QUOTA_AREA`, :data:`NODE_AREAS` or :data:`WORKLOAD_AREAS`
    (some are more than one word), :data:`HPA_AREA` for the HPA specs, else the first word after
    ``[sig-apps]`` or ``[sig-network]`` (:data:`NETWORK_AREAS`), else ``other``."""
    for area in AREAS:
        if f"[sig-apps] {area} " in name:
            return area
    for area in APIMACHINERY_AREAS:
        if f"[sig-api-machinery] {area} " in name:
            return area
    for area in AUTH_AREAS:
        if f"[sig-auth] {area} " in name:
            return area
    if f"[sig-api-machinery] {QUOTA_AREA} " in name:
        return QUOTA_AREA
    for area in NODE_AREAS:
        if f"[sig-node] {area} " in name:
            return area
    for area in WORKLOAD_AREAS:
        if f"[sig-apps] {area} " in name:
            return area
    if "[sig-autoscaling] [Feature:HPA] " in name:
        return HPA_AREA
    match = re.search(r"\[sig-(?:apps|network)\] (\w+)", name)
    return match.group(1) if match else "other"


def junit_cases(path: Path) -> list[ET.Element]:
    """The ``testcase`` elements of a ginkgo JUnit report; a report that cannot be read (a
    run cut short while writing it) raises :class:`ClusterError`."""
    try:
        # The report is ginkgo's own, written by this run, not untrusted input.
        return list(ET.parse(path).getroot().iter("testcase"))  # noqa: S314
    except (ET.ParseError, OSError) as err:
        raise ClusterError(f"cannot read the JUnit report {path}: {err}") from err


def parse_junit(path: Path, selected: Collection[str]) -> list[Spec]:
    """The outcome of each spec of ``selected`` (JUnit names, as :func:`dry_run` gives
    them) in a ginkgo JUnit report, in the report's order, then those it lacks.

    ginkgo reports a spec that a focus or skip filtered out and a spec that never ran
    because the run was interrupted, timed out or aborted the same way:
    ``status="skipped"``, ``<skipped message="skipped">``, 0 s. Only the selection tells
    them apart: such a spec outside it is left out, one inside it did not run (``not
    run``). So is a selected spec the report lacks: a failed BeforeSuite leaves every spec
    out of it, and a ginkgo process that dies the spec it was running. A spec that skipped
    itself says why (``skipped - <reason>``): it is ``not runnable`` here.
    """
    wanted = set(selected)
    specs = []
    seen = set()
    for case in junit_cases(path):
        name = case.get("name", "")
        if name not in wanted or name in seen:
            continue
        seen.add(name)
        seconds = float(case.get("time") or 0)
        failure = case.find("failure")
        error = case.find("error")
        skipped = case.find("skipped")
        if failure is not None or error is not None:
            node = failure if failure is not None else error
            assert node is not None
            message = (node.get("message") or node.text or "").strip()
            output = "".join(e.text or "" for e in case if e.tag in ("system-out", "system-err"))
            names = _namespaces(message) | set(re.findall(_DESTROYED, output))
            specs.append(Spec(name, area_of(name), FAILED, seconds, message[:2000], sorted(names)))
        elif skipped is not None:
            message = (skipped.get("message") or "").strip()
            reason = re.sub(r"^skipped(?: - )?", "", message).strip()
            if not reason and seconds == 0:
                specs.append(Spec(name, area_of(name), NOT_RUN, seconds, _NEVER_RAN))
            else:
                specs.append(
                    Spec(name, area_of(name), NOT_RUNNABLE, seconds, (reason or message)[:500])
                )
        elif case.get("status", PASSED) != PASSED:
            # A state this parser does not know: never count it as a pass.
            specs.append(Spec(name, area_of(name), FAILED, seconds, f"status {case.get('status')}"))
        else:
            specs.append(Spec(name, area_of(name), PASSED, seconds))
    specs += [Spec(n, area_of(n), NOT_RUN, 0.0, _MISSING) for n in sorted(wanted - seen)]
    return specs


_NEVER_RAN = (
    "never ran: reported skipped with no reason (the run was interrupted, timed out or "
    "aborted before it)"
)
_MISSING = (
    "never ran: missing from the JUnit report (a suite node failed before any spec ran, or "
    "the ginkgo process running it died)"
)


def suite_failures(path: Path) -> list[str]:
    """The suite nodes of a JUnit report (``[SynchronizedBeforeSuite]``,
    ``[ReportAfterSuite] ...``: everything but ``[It]``) that failed, with their message."""
    out = []
    for case in junit_cases(path):
        name = case.get("name", "")
        node = case.find("failure")
        if node is None:
            node = case.find("error")
        if not name.startswith("[It]") and node is not None:
            message = (node.get("message") or node.text or "").strip()
            out.append(f"{name} failed: {message[:500]}")
    return out


def read_run(
    junit: Path, selected: Collection[str], returncode: int
) -> tuple[list[Spec], list[str]]:
    """The specs of a finished run and what breaks the run itself, from its JUnit report,
    the selection it ran and ginkgo's exit code.

    Broken: no report (or one that cannot be read: :class:`ClusterError`), a selected
    spec that never ran, a suite node that failed, or a non-zero exit when no spec failed
    (ginkgo exits non-zero for a failed spec; otherwise the run broke in a way the
    report does not show).
    """
    if not junit.exists():
        raise ClusterError(f"ginkgo wrote no JUnit report (exit {returncode})")
    specs = parse_junit(junit, selected)
    problems = []
    never = [s for s in specs if s.state == NOT_RUN]
    if never:
        problems.append(
            f"{len(never)} of the {len(specs)} selected specs never ran, e.g. "
            f"{never[0].name}: {never[0].message}"
        )
    problems += suite_failures(junit)
    if returncode != 0 and not any(s.state == FAILED for s in specs):
        problems.append(f"ginkgo exited {returncode}, yet the report names no failed spec")
    return specs, problems


def dry_run(focus: str, skip: str, *, e2e_test: Path) -> list[str]:
    """The JUnit names of the specs ``e2e_test`` runs for ``focus`` and ``skip``, sorted:
    ``--ginkgo.dry-run``'s report (which lists what it would run as passed, the rest as
    skipped), ginkgo's own matching."""
    with tempfile.TemporaryDirectory(prefix="steward-e2e-dry-run-") as tmp:
        report = Path(tmp) / "junit.xml"
        argv = [
            str(e2e_test),
            "--ginkgo.dry-run",
            "--ginkgo.no-color",
            f"--ginkgo.focus={focus}",
            *([f"--ginkgo.skip={skip}"] if skip else []),
            f"--ginkgo.junit-report={report}",
        ]
        done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not report.exists():
            raise ClusterError(
                f"e2e.test --ginkgo.dry-run failed (exit {done.returncode}): "
                + (done.stdout + done.stderr)[-2000:]
            )
        names = [
            case.get("name", "")
            for case in junit_cases(report)
            if case.get("name", "").startswith("[It] ") and case.get("status") == PASSED
        ]
    return sorted(names)


def read_spec_list(path: Path) -> list[str]:
    """The JUnit names of the specs a spec list names (``#`` starts a comment line)."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    return ["[It] " + line for line in lines if line and not line.startswith("#")]


def format_spec_list(selection: Selection, names: Sequence[str], version: str) -> str:
    """A spec list's text: a header, then each spec's name without ``[It] ``, sorted."""
    header = [
        f"# The specs of the {selection.name!r} selection of `python -m steward.e2e`:",
        f"# {selection.about},",
        f"# as e2e.test of k8s.io/kubernetes {version} selects them. One a line: the",
        "# JUnit report's name without `[It] ` (the spec's text, then its labels).",
        "# tests/upstream_e2e requires each to pass, and this list to equal what the",
        "# pinned e2e.test selects. Refresh it after changing the pin or the selection:",
        f"#   python -m steward.e2e --selection {selection.name} --write-specs",
    ]
    return "\n".join(header + sorted(n.removeprefix("[It] ") for n in names)) + "\n"


_DESTROYED = r'Destroying namespace "([a-z0-9-]+)"'
"""How e2e's output names the namespace it made for a spec, when it deletes it."""


def _namespaces(message: str) -> set[str]:
    """The e2e namespaces a failure message names (``<base>-<digits>``)."""
    return set(re.findall(r"\b([a-z][a-z0-9-]*-\d{3,5})\b", message))


def steward_log_lines(logs: Path, names: Sequence[str], limit: int = 40) -> list[str]:
    """Lines of Steward's controller logs in the cluster's ``logs`` directory (one
    ``<controller>-controller.log`` each, kept across restarts) that name one of the
    namespaces, each after its controller's name."""
    if not names:
        return []
    lines = []
    for path in sorted(logs.glob("*-controller.log")):
        text = path.read_text(errors="replace")
        lines += [
            f"{path.stem}: {line}" for line in text.splitlines() if any(n in line for n in names)
        ]
    return lines[-limit:]


def run_side(
    side: str,
    *,
    focus: str,
    skip: str,
    procs: int,
    report_dir: Path,
    state_dir: Path,
    timeout: float,
    out: Progress,
    real_nodes: int = REAL_NODES,
    metrics: bool = False,
    kcm_flags: tuple[str, ...] = (),
) -> Side:
    """Start a cluster for ``side`` with ``real_nodes`` real nodes, run the specs, stop
    it; the outcome (a broken run's :attr:`Side.problems` say why). A focus and skip that
    select no spec raise :class:`ClusterError` before any cluster starts. ``metrics``: the
    cluster runs the resource metrics pipeline and its nodes get the resource consumer
    image (:attr:`Selection.metrics`)."""
    from steward import images  # beside the cluster tools, built on first use

    paths = binaries.resolve(TOOLS, out=out)
    selected = dry_run(focus, skip, e2e_test=paths["e2e.test"])
    if not selected:
        raise ClusterError(f"the focus {focus!r} and skip {skip!r} select no spec")
    archives = [
        images.build_e2e_archive(
            agnhost_binary=paths["agnhost"], pause_binary=paths["pause"], out=out
        )
    ]
    if metrics:
        archives.append(
            images.build_consumer_archive(
                consumer_binary=paths["resource-consumer"],
                consume_cpu_binary=paths["consume-cpu"],
                out=out,
            )
        )
    config = ClusterConfig(
        name=f"steward-e2e-{side}",
        state_dir=state_dir,
        nodes=0,
        real_nodes=real_nodes,
        real_node_taint=False,
        steward=side == "steward",
        metrics=metrics,
        kcm_flags=kcm_flags,
        node_images=tuple(archives),
        die_with_parent=True,
    )
    side_dir = report_dir / side
    side_dir.mkdir(parents=True, exist_ok=True)
    junit = side_dir / "junit.xml"
    # An earlier run's report must not stand in for one this run did not write.
    junit.unlink(missing_ok=True)
    started = time.monotonic()
    cluster = LocalCluster.up(config, progress=out)
    cluster_seconds = time.monotonic() - started
    try:
        argv = [
            str(paths["ginkgo"]),
            f"--procs={procs}",
            # ginkgo puts the report under --output-dir, even given an absolute path.
            f"--junit-report={junit.name}",
            f"--output-dir={side_dir}",
            f"--timeout={int(timeout)}s",
            "--silence-skips",
            str(paths["e2e.test"]),
            "--",
            "--provider=local",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--ginkgo.focus={focus}",
            *([f"--ginkgo.skip={skip}"] if skip else []),
            f"--report-dir={side_dir}",
        ]
        out.say(
            f"{side}: running e2e.test ({procs} processes, {len(selected)} specs): focus {focus!r}"
        )
        log = side_dir / "e2e.log"
        run_started = time.monotonic()
        with log.open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                out.tick(f"{side}: e2e running for {time.monotonic() - run_started:.0f}s")
                time.sleep(1.0)
        seconds = time.monotonic() - run_started
        try:
            specs, problems = read_run(junit, selected, proc.returncode)
        except ClusterError as err:
            raise ClusterError(f"{side}: {err}; see {log}") from err
        problems = [f"{p} (see {log})" for p in problems]
        for spec in specs:
            if spec.state == FAILED and side == "steward":
                spec.logs = steward_log_lines(cluster.state.directory / "logs", spec.namespaces)
        out.say(f"{side}: {_counts(specs)} in {seconds:.0f}s")
        for problem in problems:
            out.say(f"{side}: the run is broken: {problem}")
        return Side(side, specs, round(seconds, 1), str(junit), round(cluster_seconds, 1), problems)
    finally:
        cluster.down(progress=Progress(quiet=True))


def _counts(specs: Sequence[Spec]) -> str:
    """``n passed / n failed / n not runnable``, and ``/ n not run`` when some never ran."""
    text = " / ".join(
        f"{sum(s.state == state for s in specs)} {state}"
        for state in (PASSED, FAILED, NOT_RUNNABLE)
    )
    never = sum(s.state == NOT_RUN for s in specs)
    return text + (f" / {never} {NOT_RUN}" if never else "")


def table(results: Sequence[Side]) -> str:
    """Per area: passed / failed / not runnable here (/ never ran), one column per side."""
    header = "| area | " + " | ".join(r.side for r in results) + " |"
    lines = [header, "|---" * (len(results) + 1) + "|"]
    areas = sorted({s.area for r in results for s in r.specs}, key=_area_order)
    for area in areas:
        cells = []
        for r in results:
            cells.append(_counts([s for s in r.specs if s.area == area]))
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    lines.append(
        "| run time | "
        + " | ".join(f"{r.seconds:.0f} s (+ cluster {r.cluster_seconds:.0f} s)" for r in results)
        + " |"
    )
    return "\n".join(lines)


def _area_order(area: str) -> tuple[int, str]:
    known = (
        *AREAS,
        *NETWORK_AREAS,
        HPA_AREA,
        *APIMACHINERY_AREAS,
        *AUTH_AREAS,
        QUOTA_AREA,
        *NODE_AREAS,
        *WORKLOAD_AREAS,
    )
    return (known.index(area) if area in known else len(known), area)


def differences(results: Sequence[Side]) -> list[str]:
    """Specs that pass under upstream's controllers and not under Steward's."""
    by_side = {r.side: {s.name: s for s in r.specs} for r in results}
    if "steward" not in by_side or "upstream" not in by_side:
        return []
    return sorted(
        name
        for name, spec in by_side["upstream"].items()
        if spec.state == "passed" and by_side["steward"].get(name, spec).state != "passed"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m steward.e2e",
        description=(
            "Run Kubernetes' e2e specs (e2e.test from the pinned k8s.io/kubernetes module) "
            "against a local control plane with real nodes: under Steward's controllers, "
            "and under upstream's as the baseline. Needs root and the real nodes' packages "
            "(make node-packages). Prints a table per area and writes the JUnit reports."
        ),
    )
    parser.add_argument(
        "--sides",
        default="steward,upstream",
        help="comma-separated: steward, upstream (the baseline) (default: %(default)s)",
    )
    parser.add_argument(
        "--selection",
        default=",".join(DEFAULT_SELECTIONS),
        help=(
            "comma-separated named selections, run one after the other, each on fresh "
            "clusters: "
            + "; ".join(f"{s.name}: {s.about}" for s in SELECTIONS.values())
            + " (default: %(default)s)"
        ),
    )
    parser.add_argument(
        "--focus",
        help="ginkgo focus regexp, in place of one selection's (default: the selection's, "
        "for conformance " + CONFORMANCE.replace("%", "%%") + ")",
    )
    parser.add_argument(
        "--skip",
        help=(
            "ginkgo skip regexp (default: the selection's, for conformance [Disruptive], "
            "[Flaky], [Feature:...], [FeatureGate:...] and [Serial] outside "
            + ", ".join(SERIAL_AREAS)
            + ")"
        ),
    )
    parser.add_argument(
        "--list-specs",
        action="store_true",
        help="print the specs the focus and skip select in the pinned e2e.test, one a line "
        "(a dry run, no cluster), and exit",
    )
    parser.add_argument(
        "--write-specs",
        action="store_true",
        help="write the selection's spec list ("
        + str(SPEC_LISTS.name)
        + "/<selection>.txt in tests/upstream_e2e) from the pinned e2e.test, and exit",
    )
    parser.add_argument(
        "--real-nodes",
        type=int,
        default=REAL_NODES,
        help="real nodes of each side's cluster (default: %(default)s)",
    )
    parser.add_argument(
        "--procs", type=int, default=3, help="parallel ginkgo processes (default: %(default)s)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds for each side's run (default: 3600)"
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=Path("e2e-results"),
        help="where the JUnit reports, logs and results.json go, in <selection>/<side>/ "
        "(default: %(default)s)",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.selection.split(",") if n.strip()]
    unknown = [n for n in names if n not in SELECTIONS]
    if unknown or not names:
        parser.error(f"unknown selection(s) {unknown}: choose from {', '.join(SELECTIONS)}")
    if len(names) > 1 and (
        args.focus is not None or args.skip is not None or args.list_specs or args.write_specs
    ):
        parser.error("--focus, --skip, --list-specs and --write-specs take one --selection")
    if len(names) > 1:
        status = 0
        for name in names:
            print(f"steward e2e: selection {name}")
            status |= main([*(argv if argv is not None else sys.argv[1:]), "--selection", name])
        return status
    selection = SELECTIONS[names[0]]
    focus = selection.focus if args.focus is None else args.focus
    skip = selection.skip if args.skip is None else args.skip
    if args.list_specs or args.write_specs:
        if args.write_specs and (focus, skip) != (selection.focus, selection.skip):
            parser.error("--write-specs writes a named selection's list: drop --focus/--skip")
        try:
            names = dry_run(focus, skip, e2e_test=binaries.resolve(("e2e.test",))["e2e.test"])
        except ClusterError as err:
            print(f"steward e2e: error: {err}", file=sys.stderr)
            return 1
        if args.write_specs:
            text = format_spec_list(selection, names, binaries.TOOLS["e2e.test"].version())
            selection.spec_list().parent.mkdir(parents=True, exist_ok=True)
            selection.spec_list().write_text(text)
            print(f"{selection.spec_list()}: {len(names)} specs")
        else:
            print("\n".join(n.removeprefix("[It] ") for n in names))
        return 0
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        parser.error(f"unknown side(s) {unknown}: choose from {', '.join(SIDES)}")
    out = Progress(interval=15.0)
    report_dir = args.report_dir / selection.name
    report_dir.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for side in sides:
            state = Path(tempfile.mkdtemp(prefix=f"steward-e2e-{side}-"))
            results.append(
                run_side(
                    side,
                    focus=focus,
                    skip=skip,
                    procs=args.procs,
                    report_dir=report_dir,
                    state_dir=state,
                    timeout=args.timeout,
                    out=out,
                    real_nodes=args.real_nodes,
                    metrics=selection.metrics,
                    kcm_flags=selection.kcm_flags,
                )
            )
    except ClusterError as err:
        print(f"steward e2e: error: {err}", file=sys.stderr)
        return 1
    (report_dir / "results.json").write_text(
        json.dumps([asdict(r) for r in results], indent=2) + "\n"
    )
    print(table(results))
    for r in results:
        for spec in r.specs:
            if spec.state == "failed":
                print(f"\n{r.side}: FAILED {spec.name}\n  {spec.message[:600]}")
                for line in spec.logs:
                    print(f"    {line}")
    worse = differences(results)
    for name in worse:
        print(f"\npasses under upstream, not under Steward: {name}")
    for r in results:
        for problem in r.problems:
            print(f"\n{r.side}: the run is broken: {problem}")
    failed = any(s.state in (FAILED, NOT_RUN) for r in results for s in r.specs)
    broken = any(r.problems for r in results)
    return 1 if failed or broken or worse else 0


if __name__ == "__main__":
    sys.exit(main())
