"""In-cluster credentials (steward.kube.incluster_access): what a pod's services use.

The unit tests check the errors; the integration test lays out a service account
directory as the kubelet mounts it (a TokenRequest token, the cluster's CA) and points
KUBERNETES_SERVICE_HOST/PORT at the session cluster, then checks who the API server sees,
also after the token file is rotated.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from steward import kube
from steward.cluster import LocalCluster
from tests.deploy.harness import token


def _layout(directory: Path, token_text: str, ca: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token_text)
    (directory / "ca.crt").write_bytes(ca)
    return directory


def _whoami(access: kube.ClusterAccess) -> str:
    client = kube.KubeClient(access)
    try:
        review = client.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    finally:
        client.close()
    name: str = review["status"]["userInfo"]["username"]
    return name


@pytest.mark.unit
def test_outside_a_pod_says_which_variables_are_missing(tmp_path: Path) -> None:
    with pytest.raises(kube.ApiError, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"):
        kube.incluster_access({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, str(tmp_path))


@pytest.mark.unit
def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("x")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(kube.ApiError, match=r"token.*automountServiceAccountToken"):
        kube.incluster_access(env, str(tmp_path))


@pytest.mark.unit
def test_empty_files_are_refused(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    _layout(tmp_path, "", b"ca")
    with pytest.raises(kube.ApiError, match=r"token file .* is empty"):
        kube.incluster_access(env, str(tmp_path))
    _layout(tmp_path, "abc", b"")
    with pytest.raises(kube.ApiError, match=r"CA file .* is empty"):
        kube.incluster_access(env, str(tmp_path))


@pytest.mark.unit
def test_address_token_and_ca_come_from_the_pod(tmp_path: Path) -> None:
    _layout(tmp_path, "abc\n", b"ca")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    access = kube.incluster_access(env, str(tmp_path))
    assert access.host == "https://[fd00::1]:443"
    assert access.ca_file == str(tmp_path / "ca.crt")
    assert access.verify
    assert access.token is not None and access.token() == "Bearer abc"


@pytest.mark.unit
def test_load_access_uses_the_service_account_in_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _layout(tmp_path, "xyz", b"ca")
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    access = kube.load_access()
    assert access.host == "https://10.96.0.1:443"
    assert access.token is not None and access.token() == "Bearer xyz"


@pytest.mark.unit
def test_a_controller_in_a_pod_never_loads_the_kubernetes_package(tmp_path: Path) -> None:
    """The ``kubernetes`` package (tens of MB, seconds to import on a small node) only
    reads kubeconfigs: a controller process in a pod, its host and runtime imported and
    its credentials loaded, must not have imported it."""
    _layout(tmp_path, "xyz", b"ca")
    code = (
        "import sys; import steward.runtime.host; from steward import kube; "
        f"kube.SERVICE_ACCOUNT_DIR = {str(tmp_path)!r}; kube.load_access(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.integration
def test_a_pods_credentials_reach_the_api_server_as_its_service_account(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    names = [f"sa-{uuid.uuid4().hex[:5]}" for _ in range(2)]
    for name in names:
        cluster.api(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            ok=(201,),
        )
    ca = (cluster.state.directory / "pki" / "ca.crt").read_bytes()
    mount = _layout(tmp_path / "serviceaccount", token(cluster, namespace, names[0]), ca)
    server = urlsplit(cluster.state.server)
    env = {
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port),
    }

    access = kube.incluster_access(env, str(mount), reread_after=0.0)
    assert _whoami(access) == f"system:serviceaccount:{namespace}:{names[0]}"

    # The kubelet rotates the token in place; the next request carries the new one.
    (mount / "token").write_text(token(cluster, namespace, names[1]))
    assert _whoami(access) == f"system:serviceaccount:{namespace}:{names[1]}"

    # A token that cannot be re-read keeps the last one.
    (mount / "token").unlink()
    assert _whoami(access) == f"system:serviceaccount:{namespace}:{names[1]}"
