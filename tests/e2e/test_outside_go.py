"""A Go controller built outside the repository, as a user builds one: its own module
requiring the Go runtime's module path (``replace``d by the local ``runtimes/go``), built
with ``go build`` in a scratch directory, run against a real informer and manager and
the session's cluster.

The controller is a few lines on ``steward.Host``: it annotates every ConfigMap of its
namespace with the value of its own ``--value`` flag through the host's fenced API
client. The test sees the annotation, the manager's holder, ``/readyz`` and ``/metrics``
of ``--health-listen``, and a SIGTERM that deregisters and exits 0.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.v1 import manager_pb2 as mpb
from tests.e2e.test_go_controller import ControllerProcess, eventually
from tests.manager.conftest import RunningManager
from tests.services import host_flags, security_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
GO_RUNTIME = ROOT / "runtimes" / "go"
ANNOTATION = "outside.steward.dev/value"
NAME = "outside"


def module_path() -> str:
    """The Go runtime's module path, from its go.mod (what a user requires)."""
    match = re.search(r"^module\s+(\S+)", (GO_RUNTIME / "go.mod").read_text(), re.MULTILINE)
    assert match, "runtimes/go/go.mod names no module"
    return match.group(1)


def go_version() -> str:
    """The ``go`` directive of the runtime's go.mod (the user's module needs no newer)."""
    match = re.search(r"^go\s+(\S+)", (GO_RUNTIME / "go.mod").read_text(), re.MULTILINE)
    assert match
    return match.group(1)


MAIN_GO = """\
// Command outside is a Steward controller written outside Steward's repository: it
// annotates every ConfigMap it watches with the value of its --value flag.
package main

import (
	"context"
	"fmt"
	"net/url"

	"%(module)s/kube"
	"%(module)s/steward"
)

const annotation = "%(annotation)s"

type reconciler struct {
	mirror *steward.Mirror
	api    *kube.Client
	value  string
}

func (r *reconciler) Reconcile(ctx context.Context, req steward.Request) (steward.Result, error) {
	obj := r.mirror.Get(steward.KeyOf(steward.ConfigMaps), req.Namespace, req.Name)
	if obj == nil {
		return steward.Result{}, nil
	}
	var cm struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := obj.Decode(&cm); err != nil {
		return steward.Result{}, steward.Terminal(err)
	}
	if cm.Metadata.Annotations[annotation] == r.value {
		return steward.Result{}, nil
	}
	path := fmt.Sprintf("/api/v1/namespaces/%%s/configmaps/%%s",
		url.PathEscape(req.Namespace), url.PathEscape(req.Name))
	patch := map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{annotation: r.value},
	}}
	if err := r.api.MergePatch(ctx, path, patch, nil); err != nil && !kube.IsNotFound(err) {
		return steward.Result{}, err
	}
	return steward.Result{}, nil
}

func main() {
	var value string
	host := steward.NewHost(
		steward.NewBuilder("%(name)s").For(steward.ConfigMaps, "ConfigMap"),
		func(d steward.Deps) steward.Reconciler {
			return &reconciler{mirror: d.Mirror, api: d.API, value: value}
		},
		steward.HostOptions{Usage: "outside annotates every ConfigMap with --value."},
	)
	host.Flags.StringVar(&value, "value", "seen", "the annotation's value")
	host.Main()
}
"""

GO_MOD = """\
module example.com/outside

go %(go)s

require %(module)s v0.0.0

replace %(module)s => %(runtime)s
"""


def go_env(scratch: Path) -> dict[str, str]:
    """The environment runtimes/go's Makefile builds with (this process's, CGO off),
    resolving modules from the runtime's replace target and the module proxy, and
    writing go.sum as needed (-mod=mod); no go.work of an enclosing directory."""
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "").split()
    env["GOFLAGS"] = " ".join([*(f for f in flags if not f.startswith("-mod=")), "-mod=mod"])
    env["GOWORK"] = "off"
    env["CGO_ENABLED"] = "0"
    env.setdefault("HOME", str(scratch))
    return env


def build_outside_controller(scratch: Path) -> Path:
    """Write the controller's module into ``scratch`` and ``go build`` it; its binary."""
    if shutil.which("go") is None:
        pytest.fail("no go on PATH: the Go runtime's tests need the Go toolchain")
    src = scratch / "outside"
    src.mkdir()
    module = module_path()
    (src / "main.go").write_text(
        MAIN_GO % {"module": module, "annotation": ANNOTATION, "name": NAME}
    )
    (src / "go.mod").write_text(
        GO_MOD % {"module": module, "go": go_version(), "runtime": GO_RUNTIME}
    )
    # The runtime's checksums cover every module the controller needs but its own.
    shutil.copyfile(GO_RUNTIME / "go.sum", src / "go.sum")
    binary = scratch / "bin" / "outside"
    proc = subprocess.run(
        ["go", "build", "-trimpath", "-o", str(binary), "."],
        cwd=src,
        env=go_env(scratch),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"go build of the outside controller failed:\n{proc.stdout}\n{proc.stderr}")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


# Fixtures -----------------------------------------------------------------------------


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A scratch directory outside the repository."""
    assert not tmp_path.resolve().is_relative_to(ROOT), tmp_path
    return tmp_path


# The test -----------------------------------------------------------------------------


def test_controller_built_outside_the_tree_reconciles(
    scratch: Path,
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    informer: str,
    manager: RunningManager,
) -> None:
    binary = build_outside_controller(scratch)
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="before"), data={"a": "1"})
    )

    health = f"127.0.0.1:{free_port()}"
    argv = [
        str(binary),
        *host_flags(informer, manager.address, str(cluster.kubeconfig), namespace),
        "--health-listen",
        health,
        "--metrics-listen",
        health,
        "--value",
        "from-outside",
    ]
    proc = ControllerProcess(
        argv, scratch, "outside", security_env(cluster.client_security("admin"))
    )
    try:

        def annotation(name: str) -> str | None:
            cm = core.read_namespaced_config_map(name, namespace)
            return (cm.metadata.annotations or {}).get(ANNOTATION)

        def holder() -> str:
            try:
                reply = manager.stub.GetController(mpb.GetControllerRequest(name=NAME))
            except Exception:  # NOT_FOUND until the first registration
                return ""
            return str(reply.controller.holder)

        # Registered under the manager, it becomes the active instance and reconciles what
        # existed before it started and what is created after, with its own flag's value.
        eventually(lambda: holder() != "", f"the manager's holder of {NAME!r}")
        eventually(lambda: annotation("before") == "from-outside", "the annotation")
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="after"))
        )
        eventually(lambda: annotation("after") == "from-outside", "the new ConfigMap's annotation")
        assert proc.running(), proc.logs()

        # The host serves health and metrics on one address.
        assert http_get(f"http://{health}/healthz") == (200, "ok\n"), proc.logs()
        eventually(lambda: http_get(f"http://{health}/readyz")[0] == 200, "/readyz to be 200")
        status, metrics = http_get(f"http://{health}/metrics")
        assert status == 200, metrics
        success = re.search(
            rf'^controller_runtime_reconcile_total{{controller="{NAME}",result="success"}} (\d+)$',
            metrics,
            re.MULTILINE,
        )
        assert success and int(success.group(1)) >= 2, metrics
        assert f'steward_controller_active{{controller="{NAME}"}} 1' in metrics, metrics
        assert f'steward_fenced_writes_total{{controller="{NAME}"}} 0' in metrics, metrics

        # SIGTERM drains, deregisters and exits 0.
        assert proc.terminate() == 0, proc.logs()
        eventually(lambda: holder() == "", "the name to be released")
    finally:
        proc.kill()
