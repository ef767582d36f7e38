"""Steward's core as static pods (steward.static_core, ``steward deploy static-pods``):
what the kubelet runs from files must need no API object, no cluster network service and
no controller, and keep the Deployments' container hardening; the rest of the manifests
reach the core at the control-plane address. The pods run for real in
``tests/pods`` (pods mode boots this way); here, the manifests themselves, and a server-side
dry run of the static pods as mirror pods in kube-system."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward import deploy, static_core
from steward.cluster import LocalCluster
from tests.deploy.harness import Doc, render, wait_default_service_account

CP = "10.0.0.10"
CONTROLLERS = ("controller-replicaset", "controller-deployment")


@pytest.fixture(scope="module", params=deploy.OVERLAYS)
def docs(request: pytest.FixtureRequest) -> list[Doc]:
    return render(request.param)


@pytest.fixture(scope="module")
def pods(docs: list[Doc]) -> dict[str, Doc]:
    return static_core.static_pods(docs, host_dir="/srv/steward")


def _container(pod: Doc) -> Doc:
    containers: list[Doc] = pod["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _arg(container: Doc, flag: str) -> str:
    found = [a.split("=", 1)[1] for a in container.get("args") or [] if a.startswith(f"{flag}=")]
    assert len(found) == 1, (flag, container.get("args"))
    return str(found[0])


@pytest.mark.unit
def test_one_static_pod_per_core_component(pods: dict[str, Doc]) -> None:
    assert sorted(pods) == sorted(f"steward-{c}.yaml" for c in static_core.CORE)
    for name, pod in pods.items():
        assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "kube-system"
        assert pod["metadata"]["name"] == name.removesuffix(".yaml")
        assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == pod["metadata"]["name"]
        assert pod["metadata"]["labels"][static_core.STATIC_LABEL] == "true"


@pytest.mark.unit
def test_static_pods_need_no_api_object(pods: dict[str, Doc]) -> None:
    """The kubelet cannot give a static pod a ServiceAccount, a Secret, a ConfigMap or a
    projected token: every volume is the node's or the pod's own."""
    for pod in pods.values():
        spec = pod["spec"]
        assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is False
        for volume in spec["volumes"]:
            assert set(volume) & {"hostPath", "emptyDir"}, volume
        env = _container(pod).get("env") or []
        assert not [e for e in env if "secretKeyRef" in (e.get("valueFrom") or {})]
        assert not [e for e in env if e["name"] == "STEWARD_TOKEN_FILE"]


@pytest.mark.unit
def test_credentials_come_from_the_node_where_the_deployment_mounted_them(
    pods: dict[str, Doc], docs: list[Doc]
) -> None:
    for component in static_core.CORE:
        pod = pods[f"steward-{component}.yaml"]
        mount = static_core.CREDENTIALS[component]
        (volume,) = [v for v in pod["spec"]["volumes"] if "hostPath" in v]
        assert volume["hostPath"] == {"path": f"/srv/steward/{component}", "type": "Directory"}
        container = _container(pod)
        mounted = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mounted == [{"name": volume["name"], "mountPath": mount, "readOnly": True}]
        assert _arg(container, "--kubeconfig") == f"{mount}/kubeconfig"
        # The TLS variables stay the Deployment's, and name files of that directory.
        deployed = next(
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["name"] == f"steward-{component}"
        )
        tls = {
            e["name"]: e["value"]
            for e in deployed["spec"]["template"]["spec"]["containers"][0]["env"]
            if e["name"].endswith("_FILE") and e["name"] != "STEWARD_TOKEN_FILE"
        }
        assert tls and all(v.startswith(f"{mount}/") for v in tls.values()), tls
        assert {e["name"]: e.get("value") for e in container["env"]}.items() >= tls.items()


@pytest.mark.unit
def test_no_cluster_network_service_on_the_path(pods: dict[str, Doc]) -> None:
    """Host networking, no cluster DNS, the controllers dial the informer and the
    manager at 127.0.0.1; every component on its own host ports, probed on 127.0.0.1."""
    taken: list[int] = []
    for component in static_core.CORE:
        pod = pods[f"steward-{component}.yaml"]
        spec = pod["spec"]
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "Default"
        assert spec["priorityClassName"] == "system-node-critical"
        assert not set(spec) & {"nodeSelector", "affinity", "topologySpreadConstraints"}
        container = _container(pod)
        port = static_core.DEFAULT_PORTS[component]
        numbers = {p["name"]: p["containerPort"] for p in container["ports"]}
        taken += numbers.values()
        assert numbers["health"] == port.health and numbers["metrics"] == port.metrics
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            get = container[probe]["httpGet"]
            assert (get["host"], get["port"]) == ("127.0.0.1", port.health), (component, probe)
        if component in CONTROLLERS:
            informer = static_core.DEFAULT_PORTS["informer"].grpc
            manager = static_core.DEFAULT_PORTS["manager"].grpc
            assert _arg(container, "--informer") == f"127.0.0.1:{informer}"
            assert _arg(container, "--manager") == f"127.0.0.1:{manager}"
            health = {e["name"]: e.get("value") for e in container["env"]}
            assert health["STEWARD_HEALTH_LISTEN"] == f"127.0.0.1:{port.health}"
        else:
            assert _arg(container, "--listen") == f"0.0.0.0:{port.grpc}"
            assert _arg(container, "--health-listen") == f"127.0.0.1:{port.health}"
    assert len(taken) == len(set(taken)), taken
    assert all(1024 < p < 32768 for p in taken), "below the ephemeral range"


@pytest.mark.unit
def test_the_manager_keeps_its_leases_in_stewards_namespace(pods: dict[str, Doc]) -> None:
    container = _container(pods["steward-manager.yaml"])
    assert _arg(container, "--namespace") == "steward"
    grpc = static_core.DEFAULT_PORTS["manager"].grpc
    assert _arg(container, "--advertise") == f"$(POD_IP):{grpc}"


@pytest.mark.unit
def test_static_pods_keep_the_deployments_hardening(pods: dict[str, Doc], docs: list[Doc]) -> None:
    for component in static_core.CORE:
        pod = pods[f"steward-{component}.yaml"]
        deployed = next(
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["name"] == f"steward-{component}"
        )
        original = deployed["spec"]["template"]["spec"]["containers"][0]
        container = _container(pod)
        for field in ("image", "command", "resources", "securityContext"):
            assert container[field] == original[field], (component, field)
        assert container["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532


@pytest.mark.unit
def test_the_rest_leaves_the_core_out_and_reaches_it_at_the_control_plane(
    docs: list[Doc],
) -> None:
    rest = static_core.deployed(docs, control_plane=CP)
    names = {(d["kind"], d["metadata"]["name"]) for d in rest}
    for component in static_core.CORE:
        for kind in ("Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"):
            assert (kind, f"steward-{component}") not in names
    deployments = [d for d in rest if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {
        "steward-controller-job",
        "steward-controller-endpoint",
        "steward-controller-endpointslice",
        "steward-controller-daemonset",
        "steward-controller-horizontalpodautoscaling",
        "steward-controller-garbagecollector",
        "steward-controller-namespace",
        "steward-controller-serviceaccount",
        "steward-controller-serviceaccount-token",
        "steward-controller-legacy-service-account-token-cleaner",
        "steward-controller-root-ca-cert-publisher",
        "steward-controller-clusterrole-aggregation",
        "steward-controller-csrapproving",
        "steward-controller-csrsigning",
        "steward-controller-csrcleaner",
        "steward-controller-nodelifecycle",
        "steward-controller-taint-eviction-controller",
        "steward-controller-podgc",
        "steward-controller-ttl",
        "steward-controller-ttl-after-finished",
        "steward-controller-resourcequota",
        "steward-controller-replicationcontroller",
        "steward-controller-cronjob",
        "steward-controller-disruption",
        "steward-controller-statefulset",
    }
    for d in deployments:
        container = d["spec"]["template"]["spec"]["containers"][0]
        assert _arg(container, "--informer") == f"{CP}:10361"
        assert _arg(container, "--manager") == f"{CP}:10362"
    with pytest.raises(static_core.StaticCoreError, match="not an address"):
        static_core.deployed(docs, control_plane="http://x y")


@pytest.mark.unit
def test_the_controllers_network_policy_lets_them_out_to_the_core_only(
    docs: list[Doc],
) -> None:
    """Under default-deny, the controllers' pods may reach the control-plane address on
    the core's two ports (no pod selector can select host-network pods); the ingress
    policies of the core's pods, which are not there, go."""
    rest = static_core.deployed(docs, control_plane=CP)
    policies = {d["metadata"]["name"]: d for d in rest if d["kind"] == "NetworkPolicy"}
    assert not set(policies) & set(static_core.CORE_INGRESS_POLICIES)
    assert "steward-default-deny" in policies
    egress = policies[static_core.CONTROLLERS_EGRESS_POLICY]["spec"]["egress"]
    assert egress == [
        {
            "ports": [{"protocol": "TCP", "port": 10361}, {"protocol": "TCP", "port": 10362}],
            "to": [{"ipBlock": {"cidr": f"{CP}/32"}}],
        }
    ]
    by_name = static_core.deployed(docs, control_plane="cp.example")
    (policy,) = [d for d in by_name if d["metadata"]["name"] == "steward-controllers-egress"]
    assert "to" not in policy["spec"]["egress"][0], "a name cannot be an ipBlock"
    v6 = static_core.deployed(docs, control_plane="fd00::10")
    (policy,) = [d for d in v6 if d["metadata"]["name"] == "steward-controllers-egress"]
    assert policy["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "fd00::10/128"}}]
    job = next(
        d
        for d in v6
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "steward-controller-job"
    )
    assert _arg(job["spec"]["template"]["spec"]["containers"][0], "--informer") == (
        "[fd00::10]:10361"
    )


@pytest.mark.unit
def test_the_cores_users_are_bound_to_the_service_accounts_roles(docs: list[Doc]) -> None:
    bindings = static_core.user_bindings(docs)
    by_user = {b["subjects"][0]["name"]: b for b in bindings}
    assert set(by_user) == {static_core.user_of(c) for c in static_core.CORE}
    assert set(by_user) == {
        "steward:informer",
        "steward:manager",
        "steward:controller:replicaset",
        "steward:controller:deployment",
    }
    for user, binding in by_user.items():
        original = next(
            d
            for d in docs
            if d["kind"] == binding["kind"]
            and d["metadata"]["name"] == binding["metadata"]["name"].removesuffix("-static")
        )
        assert binding["roleRef"] == original["roleRef"], user
        assert binding["subjects"][0]["kind"] == "User"
        assert binding["metadata"].get("namespace") == original["metadata"].get("namespace")


@pytest.mark.unit
def test_the_cli_writes_the_static_pods_and_refuses_a_bad_address(tmp_path: Path) -> None:
    def steward(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward.cli", "deploy", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = steward("static-pods", "--control-plane", CP, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(f"steward-{c}.yaml" for c in static_core.CORE)
    pod = yaml.safe_load((tmp_path / "steward-informer.yaml").read_text())
    assert pod["spec"]["hostNetwork"] is True
    done = steward("render", "--control-plane", CP)
    assert done.returncode == 0, done.stderr
    kinds = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(done.stdout) if d]
    assert ("Deployment", "steward-informer") not in kinds
    assert ("ClusterRoleBinding", "steward-informer-static") in kinds
    done = steward("static-pods", "--control-plane", "not an address")
    assert done.returncode == 1 and "not an address" in done.stderr


@pytest.mark.integration
def test_static_pods_pass_a_server_side_dry_run_as_mirror_pods(cluster: LocalCluster) -> None:
    """kube-apiserver takes each static pod in kube-system (where no Pod Security level is
    enforced) as the kubelet creates its mirror pod. The API server refuses any pod, dry
    runs too, until kube-system has its default ServiceAccount, which a session cluster
    just started may not have yet."""
    wait_default_service_account(cluster, "kube-system")
    for pod in static_core.static_pods(render("production")).values():
        body: dict[str, Any] = {**pod, "metadata": {**pod["metadata"], "name": "dry"}}
        body["spec"] = {**pod["spec"], "nodeName": "nowhere"}
        created = cluster.api(
            "POST", "/api/v1/namespaces/kube-system/pods?dryRun=All", body, ok=(201,)
        )
        assert created["spec"]["hostNetwork"] is True
