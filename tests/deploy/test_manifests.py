"""The rendered manifests: every overlay (with and without Jaeger) renders, passes a
server-side dry run in a namespace enforcing the restricted Pod Security Standard, and
each Deployment's pod spec is restricted, probed and bounded as Steward's services need."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from steward import deploy
from steward.cluster import LocalCluster
from steward.cluster.registry import steward_controllers
from tests.deploy.harness import (
    KUBECTL,
    NAMESPACE,
    Doc,
    apply,
    container,
    ensure_namespace,
    find,
    render,
)

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = [
    pytest.param(overlay, jaeger, id=f"{overlay}{'+jaeger' if jaeger else ''}")
    for overlay in deploy.OVERLAYS
    for jaeger in (False, True)
]
CONTROLLERS = tuple(
    f"steward-controller-{c.name}" for c in steward_controllers() if c.enabled_by_default
)
"""A Deployment per controller of the registry that is on by default."""
OFF_BY_DEFAULT = tuple(
    f"steward-controller-{c.name}" for c in steward_controllers() if not c.enabled_by_default
)
"""The controllers off by default (upstream's too): the bootstrap-tokens component's."""
STEWARD = ("steward-informer", "steward-manager", *CONTROLLERS)
SERVERS = {"steward-informer": "STEWARD_INFORMER", "steward-manager": "STEWARD_MANAGER"}
"""The gRPC servers and the prefix of their environment variables."""
ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def deployments(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] == "Deployment"]


def restricted_violations(name: str, spec: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks the restricted Pod Security Standard (latest)."""
    bad: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            bad.append(f"{name}: {key}")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            bad.append(f"{name}: volume {volume['name']} of type {kinds}")
    for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
        sc = c.get("securityContext") or {}
        where = f"{name}/{c['name']}"
        if sc.get("privileged"):
            bad.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{where}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{where}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(f"{where}: adds capabilities {caps['add']}")
        if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))):
            bad.append(f"{where}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            bad.append(f"{where}: runs as UID 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{where}: seccompProfile {seccomp}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            bad.append(f"{where}: hostPort")
    return bad


@pytest.mark.unit
def test_the_base_deploys_the_roles_of_deploy_rbac_unchanged() -> None:
    """deploy/rbac is the one source of the services' roles: the base renders each of its
    ClusterRoles with the same rules, and no other."""
    import yaml

    listed = yaml.safe_load((ROOT / "deploy" / "rbac" / "kustomization.yaml").read_text())
    wanted = {
        doc["metadata"]["name"]: doc["rules"]
        for name in listed["resources"]
        for doc in yaml.safe_load_all((ROOT / "deploy" / "rbac" / name).read_text())
        if doc and doc.get("kind") == "ClusterRole"
    }
    rendered = {
        doc["metadata"]["name"]: doc["rules"]
        for doc in render("local")
        if doc.get("kind") == "ClusterRole"
    }
    assert rendered == wanted
    assert {
        "steward:informer",
        "steward:manager",
        *(f"steward:controller:{c.name}" for c in steward_controllers()),
    } <= set(rendered)


@pytest.mark.unit
def test_the_bootstrap_tokens_component_adds_the_controllers_off_by_default() -> None:
    """Without the component no Deployment runs what upstream leaves off; with it, each
    such controller has its Deployment and the manager turns them on (its '*' would
    not)."""
    assert OFF_BY_DEFAULT == (
        "steward-controller-bootstrapsigner",
        "steward-controller-tokencleaner",
    )
    plain = {d["metadata"]["name"] for d in deployments(render("production"))}
    assert not plain & set(OFF_BY_DEFAULT)
    docs = render("production", with_bootstrap_tokens=True)
    names = {d["metadata"]["name"] for d in deployments(docs)}
    assert names == set(STEWARD) | set(OFF_BY_DEFAULT)
    manager = container(find(docs, "Deployment", "steward-manager"))
    assert "--controllers=*,bootstrapsigner,tokencleaner" in manager["args"]
    for name in OFF_BY_DEFAULT:
        assert find(docs, "Deployment", name)["metadata"]["namespace"] == NAMESPACE
        assert "--standby" in container(find(docs, "Deployment", name))["args"], name
    # The token cleaner's Secrets rules bound in kube-system only, as upstream's Role.
    binding = find(docs, "RoleBinding", "steward-controller-tokencleaner")
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"]["name"] == "steward:controller:tokencleaner"
    assert not [
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and d["roleRef"]["name"] == "steward:controller:tokencleaner"
    ]


@pytest.mark.unit
@pytest.mark.parametrize(("overlay", "jaeger"), VARIANTS)
def test_every_overlay_renders_everything_in_the_steward_namespace(
    overlay: str, jaeger: bool
) -> None:
    docs = render(overlay, with_jaeger=jaeger)
    for d in docs:
        ns = d["metadata"].get("namespace")
        if d["kind"] in CLUSTER_SCOPED:
            assert ns is None, f"{d['kind']} {d['metadata']['name']} is cluster-scoped"
        else:
            assert ns == NAMESPACE, f"{d['kind']} {d['metadata']['name']} in {ns}"
    assert (
        find(docs, "Namespace", NAMESPACE)["metadata"]["labels"][
            "pod-security.kubernetes.io/enforce"
        ]
        == "restricted"
    )
    names = {d["metadata"]["name"] for d in deployments(docs)}
    assert names == set(STEWARD) | ({"steward-jaeger"} if jaeger else set())
    for name in STEWARD:
        sa = find(docs, "ServiceAccount", name)
        assert (
            find(docs, "Deployment", name)["spec"]["template"]["spec"]["serviceAccountName"]
            == sa["metadata"]["name"]
        )
    for name in ("steward-informer", "steward-manager"):
        find(docs, "Service", name)


@pytest.mark.unit
@pytest.mark.parametrize(("overlay", "jaeger"), VARIANTS)
def test_pod_specs_are_restricted_probed_and_bounded(overlay: str, jaeger: bool) -> None:
    for d in deployments(render(overlay, with_jaeger=jaeger)):
        name = d["metadata"]["name"]
        spec = d["spec"]["template"]["spec"]
        assert restricted_violations(name, spec) == []
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
            volumes = {v["name"]: v for v in spec.get("volumes") or []}
            assert "emptyDir" in volumes[mounts["/tmp"]], f"{name}: /tmp is not an emptyDir"
            for probe in ("livenessProbe", "readinessProbe"):
                assert probe in c, f"{name}: no {probe}"
            for kind in ("requests", "limits"):
                assert set(c["resources"][kind]) >= {"cpu", "memory"}, f"{name}: {kind}"


def _mounted_files(deployment: Doc) -> dict[str, tuple[Doc, Doc]]:
    """Mount path → (volume mount, volume) of the container's read-only volumes."""
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    return {
        m["mountPath"]: (m, volumes[m["name"]])
        for m in container(deployment).get("volumeMounts") or []
        if m.get("readOnly")
    }


def _http_probes(c: Doc) -> dict[str, Doc]:
    return {
        kind: c[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe", "startupProbe")
    }


@pytest.mark.unit
def test_probes_ask_what_each_service_serves() -> None:
    docs = render("local")
    for name in SERVERS:
        c = container(find(docs, "Deployment", name))
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert f"--listen=0.0.0.0:{ports['grpc']}" in c["args"], name
        # The kubelet cannot present a client certificate: plain HTTP on its own port.
        assert f"--health-listen=0.0.0.0:{ports['health']}" in c["args"], name
        assert ports["health"] != ports["grpc"]
        assert _http_probes(c) == {
            "livenessProbe": {"path": "/healthz", "port": "health"},
            "readinessProbe": {"path": "/readyz", "port": "health"},
            "startupProbe": {"path": "/healthz", "port": "health"},
        }, name
    for name in CONTROLLERS:
        c = container(find(docs, "Deployment", name))
        health_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "health")
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["STEWARD_HEALTH_LISTEN"] == f"0.0.0.0:{health_port}", name
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}, name
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}, name
        assert "--informer=steward-informer:50061" in c["args"], name
        assert "--manager=steward-manager:50062" in c["args"], name
    job = container(find(docs, "Deployment", "steward-controller-job"))
    assert "--no-take-unmanaged" in job["args"]
    for name in (n for n in CONTROLLERS if n != "steward-controller-job"):
        c = container(find(docs, "Deployment", name))
        metrics_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
        assert f"--metrics=0.0.0.0:{metrics_port}" in c["args"], name


@pytest.mark.unit
@pytest.mark.parametrize(("overlay", "jaeger"), VARIANTS)
def test_servers_require_mutual_tls_from_their_secret(overlay: str, jaeger: bool) -> None:
    docs = render(overlay, with_jaeger=jaeger)
    for name, prefix in SERVERS.items():
        d = find(docs, "Deployment", name)
        c = container(d)
        env = {e["name"]: e.get("value") for e in c["env"]}
        mount, volume = _mounted_files(d)["/etc/steward/tls"]
        assert volume["secret"]["secretName"] == f"{name}-tls", name
        assert env[f"{prefix}_TLS_CERT_FILE"] == "/etc/steward/tls/tls.crt"
        assert env[f"{prefix}_TLS_KEY_FILE"] == "/etc/steward/tls/tls.key"
        assert env[f"{prefix}_CLIENT_CA_FILE"] == "/etc/steward/tls/ca.crt"
        assert mount["readOnly"] is True


@pytest.mark.unit
@pytest.mark.parametrize(("overlay", "jaeger"), VARIANTS)
def test_controllers_dial_with_a_certificate_and_their_service_accounts_token(
    overlay: str, jaeger: bool
) -> None:
    docs = render(overlay, with_jaeger=jaeger)
    for name in CONTROLLERS:
        d = find(docs, "Deployment", name)
        env = {e["name"]: e.get("value") for e in container(d)["env"]}
        _, volume = _mounted_files(d)["/var/run/secrets/steward.io"]
        sources = volume["projected"]["sources"]
        assert {"secret": {"name": f"{name}-tls"}} in sources, name
        assert {
            "serviceAccountToken": {
                "audience": "steward",
                "expirationSeconds": 3600,
                "path": "token",
            }
        } in sources, name
        assert env["STEWARD_TLS_CA_FILE"] == "/var/run/secrets/steward.io/ca.crt"
        assert env["STEWARD_TLS_CERT_FILE"] == "/var/run/secrets/steward.io/tls.crt"
        assert env["STEWARD_TLS_KEY_FILE"] == "/var/run/secrets/steward.io/tls.key"
        assert env["STEWARD_TOKEN_FILE"] == "/var/run/secrets/steward.io/token"


@pytest.mark.unit
@pytest.mark.parametrize(("overlay", "jaeger"), VARIANTS)
def test_no_overlay_turns_security_off(overlay: str, jaeger: bool) -> None:
    for d in deployments(render(overlay, with_jaeger=jaeger)):
        c = container(d)
        env = [f"{e['name']}={e.get('value')}" for e in c.get("env", [])]
        words = [*c.get("args", []), *env]
        for word in words:
            assert "INSECURE_PLAINTEXT" not in word and "--insecure-plaintext" not in word, word
            assert "AlwaysAllow" not in word and "AUTHORIZATION_MODE" not in word, word


@pytest.mark.unit
def test_services_are_named_for_tracing() -> None:
    for name in STEWARD:
        env = {e["name"]: e for e in container(find(render("local"), "Deployment", name))["env"]}
        assert env["OTEL_SERVICE_NAME"]["value"] == name
        assert "k8s.pod.name=$(POD_NAME)" in env["OTEL_RESOURCE_ATTRIBUTES"]["value"]
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env


@pytest.mark.unit
@pytest.mark.parametrize("overlay", deploy.OVERLAYS)
def test_the_jaeger_component_wires_every_service(overlay: str) -> None:
    docs = render(overlay, with_jaeger=True)
    service = find(docs, "Service", "steward-jaeger")
    assert 4317 in [p["port"] for p in service["spec"]["ports"]]
    for name in STEWARD:
        env = {e["name"]: e.get("value") for e in container(find(docs, "Deployment", name))["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://steward-jaeger:4317"
    egress = find(docs, "NetworkPolicy", "steward-egress-dns-apiserver")["spec"]["egress"]
    assert any(4317 in [p["port"] for p in rule.get("ports", [])] for rule in egress)


@pytest.mark.unit
def test_only_controllers_reach_the_informer_and_the_manager() -> None:
    docs = render("local")
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    deny = find(docs, "NetworkPolicy", "steward-default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    controller_labels = [
        find(docs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        for name in CONTROLLERS
    ]
    for name in ("steward-informer", "steward-manager"):
        labels = find(docs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        ingress = [
            rule
            for p in policies
            if "Ingress" in p["spec"]["policyTypes"]
            and p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()
            and p["spec"]["podSelector"]
            for rule in p["spec"].get("ingress", [])
        ]
        assert ingress, f"no ingress rule for {name}"
        for rule in ingress:
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, f"{name}: ingress from {peer}"
                selector = peer["podSelector"]["matchLabels"]
                assert selector == {"steward.io/role": "controller"}
                for labels in controller_labels:
                    assert selector.items() <= labels.items()


@pytest.mark.unit
def test_production_runs_two_of_everything_with_budgets_and_spread() -> None:
    docs = render("production")
    for d in deployments(docs):
        name = d["metadata"]["name"]
        pod_labels = d["spec"]["template"]["metadata"]["labels"]
        assert d["spec"]["replicas"] == 2, name
        pdbs = [
            p
            for p in docs
            if p["kind"] == "PodDisruptionBudget"
            and p["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        ]
        assert len(pdbs) == 1, f"{name}: {len(pdbs)} PodDisruptionBudgets"
        spread = d["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {s["topologyKey"] for s in spread} == {
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        }
        for s in spread:
            assert s["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    local = render("local")
    for name in CONTROLLERS:
        assert "--standby" in container(find(docs, "Deployment", name))["args"], name
        assert "--standby" not in container(find(local, "Deployment", name))["args"], name
    for name in ("steward-informer", "steward-manager"):
        assert "--standby" not in container(find(docs, "Deployment", name))["args"], name


@pytest.mark.unit
def test_images_match_the_deployments() -> None:
    """Each Deployment's image is a target of deploy/images/Dockerfile whose entry point
    is the Deployment's command, running as the pods' UID."""
    dockerfile = (ROOT / "deploy" / "images" / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-bookworm$", dockerfile, re.M)
    assert "USER 65532:65532" in dockerfile
    for d in deployments(render("local")):
        c = container(d)
        target = c["image"].split(":")[0].removeprefix("steward-")
        stage = dockerfile.split(f"AS {target}\n", 1)
        assert len(stage) == 2, f"no Dockerfile target {target}"
        entry = re.search(r"^ENTRYPOINT (\[.*\])$", stage[1], re.M)
        assert entry, f"target {target} has no ENTRYPOINT"
        argv = json.loads(entry.group(1))
        assert Path(argv[0]).name == c["command"][0]
        assert argv[1:] == c["command"][1:]
        assert d["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 65532


@pytest.mark.unit
def test_render_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="steward")
    deploy.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["deploy", "render", "--overlay", "production", "--with-jaeger"])
    assert (args.overlay, args.with_jaeger) == ("production", True)
    assert deploy.main(args) == 0
    out = capsys.readouterr().out
    assert "kind: PodDisruptionBudget" in out and "steward-jaeger" in out
    with pytest.raises(SystemExit):
        parser.parse_args(["deploy", "render", "--help"])
    help_text = capsys.readouterr().out
    assert "--overlay {local,production}" in help_text and "--with-jaeger" in help_text
    assert (
        "Job, ReplicaSet, Deployment, Endpoints, EndpointSlice, DaemonSet and\n"
        "HorizontalPodAutoscaler controllers" in help_text
    )
    assert (
        "--controllers=*,-replicaset,-deployment,-endpoint,-daemonset,-horizontalpodautoscaling"
        in help_text
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["deploy", "render", "--overlay", "staging"])


@pytest.mark.unit
def test_render_errors_are_clear(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(deploy.DeployError, match="unknown overlay 'staging'"):
        deploy.render("staging", kubectl=KUBECTL)
    with pytest.raises(deploy.DeployError, match="cannot run"):
        deploy.render("local", kubectl=str(tmp_path / "no-kubectl"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(deploy.DeployError, match="kubectl not found"):
        deploy.find_kubectl()


@pytest.mark.integration
@pytest.mark.parametrize(("overlay", "jaeger"), VARIANTS)
def test_server_side_dry_run_in_a_restricted_namespace(
    cluster: LocalCluster, overlay: str, jaeger: bool
) -> None:
    docs = render(overlay, with_jaeger=jaeger)
    labels = find(docs, "Namespace", NAMESPACE)["metadata"]["labels"]
    ensure_namespace(cluster, NAMESPACE, labels)
    output = apply(cluster, docs, dry_run=True)
    assert "PodSecurity" not in output, output
    assert "(server dry run)" in output

    # Enforcement is on: a bare pod is refused, each Deployment's pod is admitted.
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }
    refused = cluster.api(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All", bare, ok=(403,)
    )
    assert "violates PodSecurity" in refused.get("message", ""), refused
    for d in deployments(docs):
        template = d["spec"]["template"]
        # The ServiceAccounts are not created by a dry run; PSS does not look at them.
        spec = {k: v for k, v in template["spec"].items() if k != "serviceAccountName"}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": d["metadata"]["name"], "labels": template["metadata"]["labels"]},
            "spec": spec,
        }
        cluster.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All", pod, ok=(201,))
