"""The registry of Steward's controllers: every controller distribution declares its
definition under the ``steward.controllers`` entry points, and the local control plane
runs exactly those; a broken declaration is an error that names it."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from steward.cluster import ClusterConfig, registry, services
from steward.cluster.identities import STEWARD_CONTROLLERS, STEWARD_IDENTITIES
from steward.cluster.state import ClusterState

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_controller_of_the_workspace_is_declared() -> None:
    declared = {c.name: c for c in registry.steward_controllers()}
    on_disk = {
        p.name
        for p in (ROOT / "services" / "controllers").iterdir()
        if (p / "pyproject.toml").exists()
    }
    # A controller's name is kube-controller-manager's --controllers alias of the
    # controller it replaces; its package is named after the directory (the Endpoints
    # controller is "endpoint" in services/controllers/endpoints).
    packages = {name: c.definition.split(".")[2] for name, c in declared.items()}
    assert set(packages.values()) == on_disk
    assert tuple(sorted(declared)) == STEWARD_CONTROLLERS
    for name, controller in declared.items():
        # One module per controller: controller.py, or a module of its own where a
        # package holds several (certificates: approving, signing, cleaner).
        module, attr = controller.definition.split(":")
        assert attr == "CONTROLLER", controller.definition
        assert module.startswith(f"steward.controllers.{packages[name]}."), module
        assert controller.launch == ("-m", "steward", "run", name)
        assert f"controller-{name}" in STEWARD_IDENTITIES
        assert (ROOT / "deploy" / "rbac" / f"controller-{name}.yaml").exists()
    # The Job controller can run beside upstream's (Jobs name theirs in spec.managedBy),
    # and so can the EndpointSlice controller (given a managed-by value of its own).
    assert declared["job"].beside_upstream == ("--no-take-unmanaged",)
    assert declared["job"].alone == ("--take-unmanaged",)
    # Alone it writes upstream's managed-by value (its default), beside upstream's its own.
    assert declared["endpointslice"].beside_upstream == (
        "--managed-by=endpointslice-controller.steward.io",
    )
    # Alone, it deletes the slices it wrote beside upstream's before a hand-over.
    assert declared["endpointslice"].alone == (
        "--replace-managed-by=endpointslice-controller.steward.io",
    )
    assert declared["replicaset"].beside_upstream is None
    # The ReplicationController controller is the ReplicaSet controller's sync for the
    # other kind: a second definition of the same package, alone as well.
    assert packages["replicationcontroller"] == "replicaset"
    assert declared["replicationcontroller"].definition == (
        "steward.controllers.replicaset.replication:CONTROLLER"
    )
    assert declared["replicationcontroller"].beside_upstream is None
    assert packages["endpoint"] == "endpoints"
    assert declared["endpoint"].beside_upstream is None
    # DaemonSets have no spec.managedBy either: Steward's runs only where upstream's is off.
    assert declared["daemonset"].beside_upstream is None
    assert declared["daemonset"].alone == ()
    # Nor do HPAs: kube-controller-manager's alias horizontalpodautoscaling (its
    # horizontal-pod-autoscaler-controller), in services/controllers/hpa.
    assert packages["horizontalpodautoscaling"] == "hpa"
    assert declared["horizontalpodautoscaling"].beside_upstream is None
    assert declared["horizontalpodautoscaling"].alone == ()


def test_the_metadata_alone_names_each_controllers_definition_and_distribution() -> None:
    """What the image builder reads (nothing imported): the same controllers, definitions
    and commands as the loaded registry, each from the workspace package of its directory."""
    loaded = {c.name: (c.definition, c.launch) for c in registry.steward_controllers()}
    declared = registry.declared_controllers()
    assert {c.name: (c.definition, c.launch) for c in declared} == loaded
    assert tuple(c.name for c in declared) == STEWARD_CONTROLLERS
    for controller in declared:
        package = controller.definition.split(".")[2]
        project = (ROOT / "services" / "controllers" / package / "pyproject.toml").read_text()
        assert f'name = "{controller.distribution}"' in project, controller


def test_upstreams_controllers_of_those_names_are_switched_off() -> None:
    config = ClusterConfig(steward=True)
    assert config.kcm_controllers() == "*," + ",".join(f"-{n}" for n in STEWARD_CONTROLLERS)
    # Self-hosted too: Steward's static core reaches nothing through Services, so none of
    # upstream's controllers has to stay on for Steward to boot or recover.
    pods = ClusterConfig(steward_pods=True).kcm_controllers()
    assert pods == config.kcm_controllers()


def test_controllers_off_by_default_run_only_when_named() -> None:
    """As kube-controller-manager's '*': bootstrapsigner and tokencleaner are not run by
    '*' on either side; named, Steward runs them (upstream's stays off, the manager is
    told) and every other Steward controller still replaces upstream's."""
    assert not registry.upstream_runs("*", "bootstrapsigner")
    assert registry.upstream_runs("*,bootstrapsigner", "bootstrapsigner")
    assert registry.upstream_runs("*", "serviceaccount")
    off = {c.name for c in registry.steward_controllers() if not c.enabled_by_default}
    assert off == {"bootstrapsigner", "tokencleaner"}
    assert services.manager_controllers("*") == []
    assert services.manager_controllers("*,tokencleaner") == ["--controllers=*,tokencleaner"]
    named = ClusterConfig(steward=True, controllers="*,bootstrapsigner")
    assert named.kcm_controllers() == ClusterConfig(steward=True).kcm_controllers()
    # Anything else stays kube-controller-manager's own choice, as before.
    assert ClusterConfig(steward=True, controllers="*,-job").kcm_controllers() == "*,-job"
    # A few of Steward's: only those are upstream's off (else no one runs Deployments).
    few = ClusterConfig(steward=True, steward_controllers=("nodelifecycle", "job"))
    assert few.kcm_controllers() == "*,-job,-nodelifecycle"


def test_the_cluster_keys_go_only_to_controllers_that_declare_their_flags(
    tmp_path: Path,
) -> None:
    state = ClusterState(name="x", directory=tmp_path, ports={})
    flags = {c.name: c.flags for c in registry.steward_controllers()}
    pki = tmp_path / "pki"
    assert services.cluster_files(state, flags["csrsigning"]) == [
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
    ]
    assert services.cluster_files(state, flags["serviceaccount-token"]) == [
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
    ]
    assert services.cluster_files(state, flags["root-ca-cert-publisher"]) == [
        f"--root-ca-file={pki / 'ca.crt'}"
    ]
    for name in ("job", "csrapproving", "serviceaccount", "namespace"):
        assert services.cluster_files(state, flags[name]) == [], name


def test_kcm_flags_reach_the_steward_controllers_that_declare_them() -> None:
    # Breaks if a cluster's kube-controller-manager settings (e2e's pod GC threshold) are
    # not given to Steward's controller of the same flag, or leak to others.
    flags = {c.name: c.flags for c in registry.steward_controllers()}
    kcm = ("--root-ca-file=/x", "--v=4", "--service-account-private-key-file=/k")
    assert services.shared_flags(kcm, flags["job"]) == []
    assert services.shared_flags(kcm, flags["root-ca-cert-publisher"]) == ["--root-ca-file=/x"]
    assert services.shared_flags(kcm, flags["serviceaccount-token"]) == [
        "--root-ca-file=/x",
        "--service-account-private-key-file=/k",
    ]


def test_a_declaration_that_does_not_load_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = EntryPoint("ghost", "steward.controllers.ghost.controller:CONTROLLER", registry.GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [broken])
    with pytest.raises(registry.RegistryError, match=r"'ghost'.*cannot be loaded"):
        registry.steward_controllers()
    wrong = EntryPoint("ghost", "steward.cluster.registry:GROUP", registry.GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [wrong])
    with pytest.raises(registry.RegistryError, match="not a controller definition"):
        registry.steward_controllers()


KCM_QUEUES = {
    "bootstrapsigner": "bootstrap_signer_queue",
    "clusterrole-aggregation": "ClusterRoleAggregator",
    "cronjob": "cronjob",
    "csrapproving": "certificate",
    "csrsigning": "certificate",
    "daemonset": "daemonset",
    "deployment": "deployment",
    "disruption": "disruption",
    "endpoint": "endpoint",
    "endpointslice": "endpoint_slice",
    "garbagecollector": "garbage_collector_attempt_to_delete",
    "horizontalpodautoscaling": "horizontalpodautoscaler",
    "job": "job",
    "namespace": "namespace",
    "nodelifecycle": "node_lifecycle_controller",
    "replicaset": "replicaset",
    "replicationcontroller": "replicationmanager",
    "resourcequota": "resourcequota_primary",
    "root-ca-cert-publisher": "root_ca_cert_publisher",
    "serviceaccount": "serviceaccount",
    "serviceaccount-token": "serviceaccount_tokens_service",
    "statefulset": "statefulset",
    "taint-eviction-controller": "noexec_taint_pod",
    "tokencleaner": "token_cleaner",
    "ttl": "ttlcontroller",
    "ttl-after-finished": "ttl_jobs_to_delete",
}
"""kube-controller-manager v1.37's work queue names (the ``name`` label of its
``workqueue_*`` metrics), from each controller's ``TypedRateLimitingQueueConfig`` in
``pkg/controller``. Where upstream has several queues, the one holding the controller's
main keys."""
NO_QUEUE_UPSTREAM = frozenset({"csrcleaner", "legacy-service-account-token-cleaner", "podgc"})
"""Upstream runs these as periodic loops without a work queue; Steward's queue keeps the
controller's name."""


def test_work_queues_carry_kube_controller_managers_names() -> None:
    """Alerts and dashboards written for kube-controller-manager's
    ``workqueue_depth{name=...}`` find Steward's queues: each controller's queue is named as
    upstream's, and a new controller must say which upstream queue it replaces."""
    declared = {c.name for c in registry.steward_controllers()}
    assert declared == set(KCM_QUEUES) | NO_QUEUE_UPSTREAM, (
        "name each new controller's upstream work queue in KCM_QUEUES"
    )
    queues = {}
    for entry in registry.steward_controllers():
        definition = EntryPoint(entry.name, entry.definition, "steward.controllers").load()
        queues[entry.name] = definition.options.queue_name or definition.name
    assert {n: queues[n] for n in KCM_QUEUES} == KCM_QUEUES
    assert {n: queues[n] for n in NO_QUEUE_UPSTREAM} == {n: n for n in NO_QUEUE_UPSTREAM}
