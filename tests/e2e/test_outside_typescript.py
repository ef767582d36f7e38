"""The TypeScript runtime as a user gets it: ``npm pack`` makes the package, a controller
project outside the repository installs the tarball with npm, compiles one TypeScript file
that imports only the package, and runs it with node against a real informer and manager
and the session's cluster. It annotates the ConfigMaps of one namespace; the test sees the
annotation, the health endpoints and the registration, and a clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from kubernetes import client

from steward.cluster import LocalCluster
from steward.v1 import manager_pb2 as mpb
from tests.e2e.test_typescript_controller import Instance, _environment, _eventually, _tls_env
from tests.manager.conftest import RunningManager
from tests.services import host_flags

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.asyncio]

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtimes" / "typescript"
PACKAGE = "@steward-dev/runtime"
NAME = "outside-annotator"
ANNOTATION = "outside.steward.dev/stamp"


CONTROLLER = """\
// A controller outside the Steward tree: it knows only the npm package.
import { ApiStatusError, UsageError, resourceType, run } from "@steward-dev/runtime";

const CONFIGMAPS = resourceType("", "v1", "configmaps");
const ANNOTATION = "outside.steward.dev/stamp";

run({
  name: "outside-annotator",
  description: "Annotates every ConfigMap with --stamp.",
  flags: { stamp: { type: "string", metavar: "VALUE", help: "the annotation's value" } },
  setup(builder, flags) {
    const stamp = flags.stamp;
    if (stamp === undefined || stamp === "") throw new UsageError("--stamp is needed");
    builder.for(CONFIGMAPS);
    return ({ mirror, api }) => ({
      async reconcile(req) {
        const cm = mirror.get(CONFIGMAPS, req.namespace, req.name);
        if (cm === undefined) return {};
        const metadata = cm.object["metadata"] as { annotations?: Record<string, string> };
        if (metadata.annotations?.[ANNOTATION] === stamp) return {};
        try {
          await api.request(
            "PATCH",
            `/api/v1/namespaces/${req.namespace}/configmaps/${req.name}`,
            { metadata: { annotations: { [ANNOTATION]: stamp } } },
            "application/merge-patch+json",
          );
        } catch (err) {
          if (err instanceof ApiStatusError && err.status === 404) return {};
          throw err;
        }
        return {};
      },
    });
  },
});
"""

TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "lib": ["ES2022"],
        "module": "node16",
        "moduleResolution": "node16",
        "rootDir": "src",
        "outDir": "dist",
        "strict": True,
        "types": ["node"],
    },
    "include": ["src"],
}


def _run(args: list[str], cwd: Path, what: str, timeout: float = 600) -> str:
    proc = subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=_environment(),
    )
    if proc.returncode != 0:
        pytest.fail(f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _dev_version(name: str) -> str:
    """The version of a devDependency pinned in the runtime's package.json."""
    manifest = json.loads((RUNTIME / "package.json").read_text())
    return str(manifest["devDependencies"][name])


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A controller project outside the repository, installed from the packed tarball and
    compiled; its ``dist/annotator.js`` is the controller."""
    make, npm = shutil.which("make"), shutil.which("npm")
    if make is None or npm is None or shutil.which("node") is None:
        pytest.fail("make, npm and node are needed to pack and build the TypeScript package")
    packs = tmp_path_factory.mktemp("ts-pack")
    _run([make, "-C", str(RUNTIME), "deps", "pack", f"PACK_DESTINATION={packs}"], ROOT, "npm pack")
    [tarball] = packs.glob("*.tgz")

    # What the tarball holds: compiled JS with declarations, a README, no tests or sources.
    listing = _run(["tar", "-tzf", str(tarball)], packs, "listing the tarball").split()
    assert "package/dist/index.js" in listing and "package/dist/index.d.ts" in listing, listing
    assert "package/dist/host.d.ts" in listing and "package/README.md" in listing, listing
    assert not [f for f in listing if f.startswith(("package/dist/test/", "package/src/"))], listing
    assert not [f for f in listing if f.endswith(".ts") and not f.endswith(".d.ts")], listing

    root = tmp_path_factory.mktemp("outside-controller")
    assert not root.resolve().is_relative_to(ROOT), f"{root} is inside the repository"
    (root / "src").mkdir()
    (root / "src" / "annotator.ts").write_text(CONTROLLER)
    (root / "tsconfig.json").write_text(json.dumps(TSCONFIG, indent=2))
    (root / "package.json").write_text(
        json.dumps(
            {
                "name": "outside-annotator",
                "version": "0.0.0",
                "private": True,
                "dependencies": {PACKAGE: f"file:{tarball}"},
                "devDependencies": {
                    "typescript": _dev_version("typescript"),
                    "@types/node": _dev_version("@types/node"),
                },
            },
            indent=2,
        )
    )
    _run([npm, "install", "--no-audit", "--no-fund", "--prefer-offline"], root, "npm install")
    installed = root / "node_modules" / "@steward-dev" / "runtime"
    assert (installed / "dist" / "index.d.ts").is_file()
    assert not installed.is_symlink(), "the package was linked, not installed"
    _run([str(root / "node_modules" / ".bin" / "tsc"), "-p", "."], root, "tsc")
    assert (root / "dist" / "annotator.js").is_file()
    return root


@pytest_asyncio.fixture
async def annotator(
    project: Path, cluster: LocalCluster, informer: str, manager: RunningManager, namespace: str
) -> AsyncIterator[tuple[Instance, str]]:
    """The compiled controller under the manager, watching the test's namespace, with its
    health and metrics endpoints on free ports: the instance and the stamp it writes."""
    stamp = f"s-{uuid.uuid4().hex[:8]}"
    log_path = project / f"annotator-{stamp}.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            "node",
            str(project / "dist" / "annotator.js"),
            *host_flags(informer, manager.address, str(cluster.kubeconfig), namespace),
            "--workers",
            "2",
            "--health-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--stamp",
            stamp,
            cwd=project,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**_environment(), **_tls_env(cluster)},
        )
    instance = Instance(proc, log_path)
    try:
        yield instance, stamp
    finally:
        await instance.stop()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def test_help_of_an_outside_controller(project: Path) -> None:
    """``--help`` lists the controller's own flag with the host's, and exits 0."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(project / "dist" / "annotator.js"),
        "--help",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_environment(),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60.0)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    for flag in ("--stamp VALUE", "--informer HOST:PORT", "--manager HOST:PORT", "--health-listen"):
        assert flag in text, text


async def test_outside_controller_reconciles_under_the_manager(
    annotator: tuple[Instance, str],
    core: client.CoreV1Api,
    namespace: str,
    manager: RunningManager,
) -> None:
    instance, stamp = annotator
    before = await asyncio.to_thread(
        core.create_namespaced_config_map,
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="before"), data={"k": "v"}),
    )
    assert before.metadata.name == "before"

    def stamped(name: str) -> bool:
        cm = core.read_namespaced_config_map(name, namespace)
        return (cm.metadata.annotations or {}).get(ANNOTATION) == stamp

    await _eventually(lambda: stamped("before"), "the ConfigMap annotated", instance)
    await asyncio.to_thread(
        core.create_namespaced_config_map,
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="later")),
    )
    await _eventually(lambda: stamped("later"), "a ConfigMap made later annotated", instance)

    def roles() -> list[int]:
        try:
            info = manager.stub.GetController(mpb.GetControllerRequest(name=NAME))
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return [i.role for i in info.controller.instances]

    assert await asyncio.to_thread(roles) == [mpb.ROLE_ACTIVE]

    probes = re.search(r"/readyz on http://(127\.0\.0\.1:\d+)", instance.log())
    exposed = re.search(r"/metrics on http://(127\.0\.0\.1:\d+)", instance.log())
    assert probes and exposed, instance.log()
    base = f"http://{probes.group(1)}"
    assert await asyncio.to_thread(_get, f"{base}/healthz") == (200, "ok\n")
    assert await asyncio.to_thread(_get, f"{base}/readyz") == (200, "ok\n")
    status, metrics = await asyncio.to_thread(_get, f"http://{exposed.group(1)}/metrics")
    assert status == 200
    success = re.search(
        rf'^controller_runtime_reconcile_total{{controller="{NAME}",result="success"}} (\d+)$',
        metrics,
        re.MULTILINE,
    )
    assert success and int(success.group(1)) >= 2, metrics
    assert re.search(rf'^steward_controller_active{{controller="{NAME}"}} 1$', metrics, re.M)

    # SIGTERM: a clean exit that deregisters.
    assert await instance.stop() == 0, instance.log()
    await _eventually(lambda: roles() == [], "the instance deregistered", instance)
