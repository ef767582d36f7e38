"""Which of e2e's specs ``make e2e`` selects by default, and the area each is counted in:
upstream's own spec names (as ``e2e.test --ginkgo.dry-run`` lists them: the containers'
tags such as ``[Serial]`` at the end), matched as ginkgo matches its focus and skip (the
suite's description, a space, the name) with the regexps the runner hands it (RE2: Python's
``re`` reads the same syntax used here), and the JUnit report's names (``[It] <name>
[<labels>]``) counted by area.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from steward import e2e

pytestmark = pytest.mark.unit

DAEMON_SET_CONFORMANCE = [
    "[sig-apps] Daemon set should run and stop simple daemon [Conformance] [Serial]",
    "[sig-apps] Daemon set should run and stop complex daemon [Conformance] [Serial]",
    "[sig-apps] Daemon set should retry creating failed daemon pods [Conformance] [Serial]",
    "[sig-apps] Daemon set should update pod when spec was updated and update strategy is "
    "RollingUpdate [Conformance] [Serial]",
    "[sig-apps] Daemon set should rollback without unnecessary restarts [Conformance] [Serial]",
    "[sig-apps] Daemon set should list and delete a collection of DaemonSets [Conformance] "
    "[Serial]",
    "[sig-apps] Daemon set should verify changes to a daemon set status [Conformance] [Serial]",
]

OTHER_CONFORMANCE = [
    "[sig-apps] Job should delete a job [Conformance]",
    "[sig-apps] Deployment deployment should support rollover [Conformance]",
    "[sig-apps] ReplicaSet should serve a basic image on each replica with a public image "
    "[Conformance]",
]


SUITE = "Kubernetes e2e suite"


def selected(name: str, focus: str = e2e.CONFORMANCE, skip: str = e2e.SKIP) -> bool:
    text = f"{SUITE} {name}"
    return bool(re.search(focus, text)) and not re.search(skip, text)


@pytest.mark.parametrize("name", DAEMON_SET_CONFORMANCE + OTHER_CONFORMANCE)
def test_every_conformance_spec_of_the_areas_is_selected(name: str) -> None:
    assert selected(name)


@pytest.mark.parametrize(
    "name",
    [
        # [Serial] outside the DaemonSet area stays out, whatever the focus.
        "[sig-apps] Job should run a job to completion with CPU requests [Serial]",
        "[sig-apps] ControllerRevision should manage the lifecycle of a ControllerRevision "
        "[Conformance] [Serial]",
        "[sig-apps] DisruptionController evictions: too few pods, replicaSet, percentage => "
        "should not allow an eviction [Serial]",
        "[sig-node] Daemon set imagined elsewhere [Serial]",
        "[sig-apps] DaemonRestart [Provider:gce,aws,local,azure] Kube-proxy should recover "
        "after being killed accidentally [Disruptive]",
        "[sig-apps] Daemon set imagined flaky [Flaky] [Serial]",
        "[sig-apps] Daemon set imagined gated [Feature:Something] [Serial]",
    ],
)
def test_serial_disruptive_flaky_and_gated_specs_stay_out(name: str) -> None:
    assert not selected(name, focus=r"\[sig-")


def test_daemon_set_specs_that_are_not_conformance_run_when_focused() -> None:
    name = (
        "[sig-apps] Daemon set should surge pods onto nodes when spec was updated and update "
        "strategy is RollingUpdate [Serial]"
    )
    assert not selected(name)
    assert selected(name, focus=r"\[sig-apps\] Daemon set")


def junit_name(name: str) -> str:
    labels = ", ".join(re.findall(r"\[(sig-\w+|Serial|Conformance)\]", name))
    return f"[It] {name} [{labels}]"


def test_each_spec_is_counted_in_its_area() -> None:
    assert {e2e.area_of(junit_name(n)) for n in DAEMON_SET_CONFORMANCE} == {"Daemon set"}
    assert [e2e.area_of(junit_name(n)) for n in OTHER_CONFORMANCE] == [
        "Job",
        "Deployment",
        "ReplicaSet",
    ]
    assert e2e.area_of("[It] [sig-apps] DaemonRestart x [Disruptive]") == "DaemonRestart"
    assert e2e.area_of("[It] [sig-apps] ControllerRevision x [Serial]") == "ControllerRevision"
    assert e2e.area_of("[It] [sig-node] Pods should x [sig-node]") == "other"
    network = e2e.read_spec_list(e2e.SELECTIONS["network"].spec_list())
    assert {e2e.area_of(junit_name(n)) for n in network} == set(e2e.NETWORK_AREAS)
    autoscaling = e2e.read_spec_list(e2e.SELECTIONS["autoscaling"].spec_list())
    assert {e2e.area_of(n) for n in autoscaling} == {e2e.HPA_AREA}
    apimachinery = e2e.read_spec_list(e2e.SELECTIONS["apimachinery"].spec_list())
    assert {e2e.area_of(n) for n in apimachinery} == set(e2e.APIMACHINERY_AREAS)
    auth = e2e.read_spec_list(e2e.SELECTIONS["auth"].spec_list())
    assert {e2e.area_of(n) for n in auth} == set(e2e.AUTH_AREAS)
    nodes = e2e.read_spec_list(e2e.SELECTIONS["nodes"].spec_list())
    assert {e2e.area_of(n) for n in nodes} == {e2e.QUOTA_AREA, *e2e.NODE_AREAS}
    workloads = e2e.read_spec_list(e2e.SELECTIONS["workloads"].spec_list())
    assert {e2e.area_of(n) for n in workloads} == set(e2e.WORKLOAD_AREAS)
    assert (
        e2e.area_of(
            "[It] [sig-api-machinery] OrderedNamespaceDeletion namespace deletion should "
            "delete pod first [Conformance] [sig-api-machinery, Conformance]"
        )
        == "other"
    )


def test_the_autoscaling_selection_is_what_two_cores_carry() -> None:
    """Every HPA spec is ``[Feature:HPA]``: the default skip would drop them all. Heavy,
    gated, serial and memory specs stay out; only that selection runs a metrics pipeline."""
    light = (
        "[sig-autoscaling] [Feature:HPA] Horizontal pod autoscaling (scale resource: CPU) "
        "ReplicaSet light Should scale from 1 pod to 2 pods"
    )
    heavy = [
        "[sig-autoscaling] [Feature:HPA] Horizontal pod autoscaling (scale resource: CPU) "
        "ReplicaSet Should scale from 1 pod to 3 pods and then from 3 pods to 5 pods [Slow]",
        "[sig-autoscaling] [Feature:HPA] Horizontal pod autoscaling (scale resource: Memory) "
        "Deployment (Pod Resource) Should scale from 1 pod to 3 pods and then from 3 pods to "
        "5 pods using Average Value for aggregation",
        "[sig-autoscaling] [Feature:HPA] Horizontal pod autoscaling (non-default behavior) "
        "with autoscaling disabled shouldn't scale up",
        "[sig-autoscaling] [Feature:HPA] [FeatureGate:HPAScaleToZero] Horizontal pod "
        "autoscaling (scale to zero) should scale down to zero and back up based on external "
        "metric value [Beta] [Serial]",
    ]
    selection = e2e.SELECTIONS["autoscaling"]
    assert not selected(light)
    assert selected(light, focus=selection.focus, skip=selection.skip)
    for name in heavy:
        assert not selected(name, focus=selection.focus, skip=selection.skip), name
    assert [s.name for s in e2e.SELECTIONS.values() if s.metrics] == ["autoscaling"]


APIMACHINERY_SERIAL = [
    "[sig-api-machinery] Namespaces should ensure that all pods are removed when a namespace "
    "is deleted [Conformance] [Serial]",
    "[sig-api-machinery] Namespaces should delete fast enough (90 percent of 100 namespaces "
    "in 150 seconds) [Serial]",
    "[sig-api-machinery] Garbage collector should keep the rc around until all its pods are "
    "deleted if the deleteOptions says so [Conformance] [Serial]",
]


def test_the_apimachinery_selection_runs_its_serial_specs() -> None:
    """The default skip drops every Namespaces spec and the big Garbage collector ones
    (``[Serial]`` outside the DaemonSet area); this selection keeps them, leaves out the
    feature-gated draining spec, and no other area of ``[sig-api-machinery]``."""
    selection = e2e.SELECTIONS["apimachinery"]
    parallel = (
        "[sig-api-machinery] Garbage collector should delete jobs and pods created by cronjob"
    )
    assert selected(parallel, focus=selection.focus, skip=selection.skip)
    for name in APIMACHINERY_SERIAL:
        assert not selected(name, focus=selection.focus), name
        assert selected(name, focus=selection.focus, skip=selection.skip), name
    for name in [
        "[sig-api-machinery] Namespaces should always delete fast (ALL of 100 namespaces in "
        "150 seconds) [Feature:ComprehensiveNamespaceDraining] [Serial]",
        "[sig-api-machinery] OrderedNamespaceDeletion namespace deletion should delete pod "
        "first [Conformance]",
        "[sig-api-machinery] Garbage collector imagined disruptive [Disruptive] [Serial]",
        "[sig-apps] Job should run a job to completion with CPU requests [Serial]",
    ]:
        assert not selected(name, focus=selection.focus, skip=selection.skip), name
    assert "apimachinery" in e2e.DEFAULT_SELECTIONS


@dataclass(frozen=True)
class Expected:
    """What one selection must and must not take."""

    takes: tuple[str, ...]
    leaves: tuple[str, ...]
    kcm_flags: tuple[str, ...] = ()


EXPECTED = {
    # ServiceAccounts and the Certificates API, conformance and not; feature-gated specs
    # and other [sig-auth] areas stay out.
    "auth": Expected(
        takes=(
            "[sig-auth] ServiceAccounts should guarantee kube-root-ca.crt exist in any "
            "namespace [Conformance]",
            "[sig-auth] ServiceAccounts no secret-based service account token should be "
            "auto-generated",
            "[sig-auth] Certificates API [Privileged:ClusterAdmin] should support building a "
            "client with a CSR",
        ),
        leaves=(
            "[sig-auth] ServiceAccounts should x [FeatureGate:SomeGate]",
            "[sig-auth] SubjectReview should support SubjectReview API operations [Conformance]",
            "[sig-auth] ServiceAccounts should y [Feature:SomeFeature]",
        ),
    ),
    # ResourceQuota, taint eviction, pod GC and NodeLease, conformance and not, with the
    # pod GC spec's threshold; feature-gated, disruptive and other [sig-node] specs out.
    "nodes": Expected(
        takes=(
            "[sig-api-machinery] ResourceQuota should verify ResourceQuota with terminating "
            "scopes. [Conformance]",
            "[sig-api-machinery] ResourceQuota [Feature:PodPriority] should verify "
            "ResourceQuota's priority class scope (quota set to pod count: 1) against a pod "
            "with same priority class.",
            "[sig-node] NoExecuteTaintManager Single Pod evicts pods from tainted nodes [Serial]",
            "[sig-node] NoExecuteTaintManager Multiple Pods only evicts pods without "
            "tolerations from tainted nodes [Serial]",
            "[sig-node] Pod garbage collector [Feature:PodGarbageCollector] should handle the "
            "creation of 1000 pods [Slow]",
            "[sig-node] NodeLease NodeLease should have OwnerReferences set [NodeConformance]",
        ),
        leaves=(
            "[sig-api-machinery] ResourceQuota should x [FeatureGate:SomeGate]",
            "[sig-node] NoExecuteTaintManager Single Pod x [Disruptive] [Serial]",
            "[sig-node] Pods should x [NodeConformance]",
            "[sig-node] Taints x [Serial]",
        ),
        kcm_flags=("--terminated-pod-gc-threshold=100",),
    ),
    # CronJob, ReplicationController, TTLAfterFinished and DisruptionController,
    # conformance, slow, serial and not; the cloud provider's spec, feature-gated ones and
    # other [sig-apps] areas stay out.
    "workloads": Expected(
        takes=(
            "[sig-apps] CronJob should not schedule jobs when suspended [Conformance] [Slow]",
            "[sig-apps] CronJob should support timezone",
            "[sig-apps] ReplicationController should adopt matching pods on creation [Conformance]",
            "[sig-apps] TTLAfterFinished job should be deleted once it finishes after TTL seconds",
            "[sig-apps] DisruptionController should block an eviction until the PDB is updated "
            "to allow it [Conformance]",
            "[sig-apps] DisruptionController evictions: maxUnavailable deny evictions, integer "
            "=> should not allow an eviction [Serial]",
        ),
        leaves=(
            "[sig-apps] ReplicationController should serve a basic image on each replica "
            "with a private image [Provider:gce]",
            "[sig-apps] CronJob should x [FeatureGate:SomeGate]",
            "[sig-apps] StatefulSet Basic StatefulSet functionality should x [Conformance]",
            "[sig-apps] ReplicaSet should x [Conformance]",
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_controllers_selection_takes_its_areas_and_no_other(name: str) -> None:
    """Each selection of Steward's controllers' areas is in ``make e2e``, takes its
    areas' specs, conformance and not, and leaves out what needs a feature gate, breaks
    the cluster, or belongs to another area; with the kube-controller-manager flags its
    specs need."""
    selection, expected = e2e.SELECTIONS[name], EXPECTED[name]
    for spec in expected.takes:
        assert selected(spec, focus=selection.focus, skip=selection.skip), spec
    for spec in expected.leaves:
        assert not selected(spec, focus=selection.focus, skip=selection.skip), spec
    assert selection.kcm_flags == expected.kcm_flags
    assert name in e2e.DEFAULT_SELECTIONS


def test_the_table_lists_the_areas_in_order() -> None:
    specs = [
        e2e.Spec(DAEMON_SET_CONFORMANCE[0], "Daemon set", "passed", 1.0),
        e2e.Spec(DAEMON_SET_CONFORMANCE[1], "Daemon set", "failed", 1.0),
        e2e.Spec(OTHER_CONFORMANCE[0], "Job", "passed", 1.0),
    ]
    lines = e2e.table([e2e.Side("steward", specs, 2.0, "junit.xml", 1.0)]).splitlines()
    assert lines[2] == "| Job | 1 passed / 0 failed / 0 not runnable |"
    assert lines[3] == "| Daemon set | 1 passed / 1 failed / 0 not runnable |"
    collector = "[sig-api-machinery] Garbage collector should x"
    namespaces = "[sig-api-machinery] Namespaces should y [Serial]"
    specs = [
        e2e.Spec(namespaces, e2e.area_of(namespaces), "passed", 1.0),
        e2e.Spec("[sig-node] Pods z", "other", "passed", 1.0),
        e2e.Spec(collector, e2e.area_of(collector), "failed", 1.0),
    ]
    lines = e2e.table([e2e.Side("upstream", specs, 2.0, "junit.xml", 1.0)]).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:5]] == [
        "| Garbage collector",
        "| Namespaces",
        "| other",
    ]


def test_a_failure_names_the_namespace_e2e_destroyed_for_it(tmp_path: Path) -> None:
    """A timeout's message names no namespace; the spec's output does, and Steward's log
    lines are looked up by it. A passed spec's namespace is not collected."""
    failed, passed = DAEMON_SET_CONFORMANCE[0], DAEMON_SET_CONFORMANCE[1]
    report = tmp_path / "junit.xml"
    report.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite>'
        f'<testcase name="[It] {failed} [sig-apps, Serial, Conformance]" time="300.1">'
        '<failure message="error waiting for daemon pod to start: context deadline exceeded"'
        ' type="failed">[FAILED]</failure>'
        "<system-err>STEP: Destroying namespace &quot;daemonsets-2297&quot; for this suite."
        "</system-err></testcase>"
        f'<testcase name="[It] {passed} [sig-apps, Serial, Conformance]" time="4.0">'
        "<system-err>STEP: Destroying namespace &quot;daemonsets-1234&quot; for this suite."
        "</system-err></testcase>"
        "</testsuite></testsuites>\n"
    )
    names = [f"[It] {n} [sig-apps, Serial, Conformance]" for n in (failed, passed)]
    specs = e2e.parse_junit(report, names)
    assert [(s.state, s.namespaces) for s in specs] == [
        ("failed", ["daemonsets-2297"]),
        ("passed", []),
    ]


def test_a_failure_gets_the_controller_log_lines_naming_its_namespaces(tmp_path: Path) -> None:
    """The supervisor writes each of Steward's controllers to ``<name>-controller.log``;
    the lines naming a failed spec's namespaces come from those, not from the other
    components' logs (kube-controller-manager's names every namespace too)."""
    (tmp_path / "namespace-controller.log").write_text(
        "namespace nsdeletetest-4592: content removed, finalized\n"
        "namespace gc-717 has been deleted\n"
    )
    (tmp_path / "garbagecollector-controller.log").write_text(
        "[v1/Pod, namespace: nsdeletetest-4592, name: p]: every owner is gone\n"
    )
    (tmp_path / "kube-controller-manager.log").write_text("nsdeletetest-4592\n")
    assert e2e.steward_log_lines(tmp_path, ["nsdeletetest-4592"]) == [
        "garbagecollector-controller: [v1/Pod, namespace: nsdeletetest-4592, name: p]: every "
        "owner is gone",
        "namespace-controller: namespace nsdeletetest-4592: content removed, finalized",
    ]
    assert e2e.steward_log_lines(tmp_path, []) == []
