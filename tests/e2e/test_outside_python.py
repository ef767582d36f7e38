"""A Python controller outside this repository: the runtime's wheel (``uv build``) is
installed into a fresh virtual environment in a scratch directory, a one-file controller
that imports only ``steward`` runs there against the real informer and manager, and it
reconciles. The wheel holds the author library alone, and its metadata names what it
needs."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.v1 import manager_pb2 as mpb
from tests.manager.conftest import RunningManager
from tests.services import host_flags

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "bin" / "uv"
NAME = "outside-python"

CONTROLLER = """
import steward


async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
    obj = ctx.mirror.get(steward.CONFIGMAPS, request.namespace, request.name)
    if obj is None or (obj.object["metadata"].get("annotations") or {}).get("seen"):
        return steward.Result()
    patch = {"metadata": {"annotations": {"seen": obj.resource_version}}}
    configmaps = ctx.client(steward.CONFIGMAPS)
    await configmaps.patch(request.namespace, request.name, patch, patch_type="merge")
    return steward.Result()


CONTROLLER = (
    steward.ControllerBuilder("outside-python").for_(steward.CONFIGMAPS).complete(reconcile)
)

if __name__ == "__main__":
    raise SystemExit(steward.run(CONTROLLER))
"""


def _run(argv: list[str], cwd: Path) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory with a virtual environment holding only the runtime's wheel
    (and what its metadata asks for)."""
    scratch = tmp_path_factory.mktemp("outside-python")
    _run([str(UV), "build", "--wheel", "--package", "steward", "-o", str(scratch / "dist")], ROOT)
    wheels = list((scratch / "dist").glob("steward-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "steward/__init__.py" in names
    assert "steward/runtime/host.py" in names
    for tooling in ("steward/cli.py", "steward/cluster/", "steward/serving/", "steward/informer/"):
        assert not any(n.startswith(tooling) for n in names), tooling
    for dependency in ("grpcio", "kubernetes", "protobuf", "orjson", "opentelemetry-sdk"):
        assert f"Requires-Dist: {dependency}" in metadata
    _run([str(UV), "venv", "--python", sys.executable, str(scratch / "venv")], scratch)
    python = scratch / "venv" / "bin" / "python"
    _run([str(UV), "pip", "install", "--python", str(python), str(wheels[0])], scratch)
    (scratch / "controller.py").write_text(CONTROLLER)
    return scratch


def test_a_controller_outside_the_tree_reconciles_with_the_installed_wheel(
    venv: Path,
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    dev_informer: str,
    dev_manager: RunningManager,
) -> None:
    core = client.CoreV1Api(api_client)
    python = venv / "venv" / "bin" / "python"
    # The scratch environment cannot see this repository's sources.
    probe = _run([str(python), "-c", "import steward, sys; print(steward.__file__)"], venv)
    assert str(ROOT) not in probe and "site-packages" in probe
    log = (venv / "controller.log").open("w")
    proc = subprocess.Popen(
        [
            str(python),
            "controller.py",
            *host_flags(dev_informer, dev_manager.address, str(cluster.kubeconfig), namespace),
            "--insecure-plaintext",
        ],
        cwd=venv,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="outside"))
        )
        deadline = time.monotonic() + 90
        seen = None
        while time.monotonic() < deadline and proc.poll() is None:
            cm = core.read_namespaced_config_map("outside", namespace)
            seen = (cm.metadata.annotations or {}).get("seen")
            if seen:
                break
            time.sleep(0.3)
        assert proc.poll() is None, (venv / "controller.log").read_text()
        assert seen, "the outside controller never reconciled the ConfigMap"
        holder = dev_manager.stub.GetController(
            mpb.GetControllerRequest(name=NAME)
        ).controller.holder
        assert holder, "the outside controller is not the manager's active instance"
    finally:
        proc.terminate()
        try:
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
