"""An exec credential plugin, as every managed cloud cluster's kubeconfig uses one, in all
three runtimes: ``KUBECONFIG`` lists two files (the first holds the context and the
cluster, the second the user, whose ``exec`` is a small shell script printing an
``ExecCredential`` with a ServiceAccount token from the TokenRequest API and its expiry).
A client of each runtime (Python's ``steward.kube``, Go's ``kube`` package, TypeScript's
``kube.ts``), built from that environment alone, asks the session's kube-apiserver who it
is (SelfSubjectReview) twice and sees the ServiceAccount's identity; the plugin ran once
(the credential is cached until it expires).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from steward.cluster import LocalCluster
from tests.e2e.test_outside_go import GO_MOD, go_env, go_version, module_path

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GO_RUNTIME = ROOT / "runtimes" / "go"
TS_RUNTIME = ROOT / "runtimes" / "typescript"
SERVICE_ACCOUNT = "exec-plugin-user"
REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

PLUGIN = """\
#!/bin/sh
# An exec credential plugin: counts its runs and prints the credential beside it.
here=$(dirname "$0")
echo run >> "$here/runs"
cat "$here/credential.json"
"""

GO_MAIN = """\
// Command whoami asks kube-apiserver who it is, twice, with the kube package's client
// from $KUBECONFIG, and prints the user name each time.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"%(module)s/kube"
)

func main() {
	cfg, err := kube.LoadConfig("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	api := kube.NewClient(cfg, "steward-exec-credentials-test")
	review := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
	for range 2 {
		var out struct {
			Status struct {
				UserInfo struct {
					Username string `json:"username"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		err := api.Do(context.Background(), http.MethodPost, "%(review)s", "", review, &out)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(out.Status.UserInfo.Username)
	}
}
"""

TS_MAIN = """\
const { KubeClient, clusterAccess } = require(%(kube)s);
(async () => {
  const api = new KubeClient(clusterAccess());
  const review = { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" };
  try {
    for (let i = 0; i < 2; i++) {
      const res = await api.request("POST", %(review)s, review);
      console.log(res.body.status.userInfo.username);
    }
  } finally {
    api.close();
  }
})().catch((err) => {
  console.error(String(err));
  process.exit(1);
});
"""

PY_MAIN = """\
from steward.kube import KubeClient, load_access

api = KubeClient(load_access())
review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
for _ in range(2):
    print(api.request("POST", %(review)r, review)["status"]["userInfo"]["username"])
"""


@pytest.fixture(scope="module")
def go_whoami(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go program, built in a module of its own that requires the runtime."""
    if shutil.which("go") is None:
        pytest.fail("no go on PATH: the Go runtime's tests need the Go toolchain")
    scratch = tmp_path_factory.mktemp("go-whoami")
    module = module_path()
    (scratch / "main.go").write_text(GO_MAIN % {"module": module, "review": REVIEW})
    (scratch / "go.mod").write_text(
        GO_MOD.replace("example.com/outside", "example.com/whoami")
        % {"module": module, "go": go_version(), "runtime": GO_RUNTIME}
    )
    shutil.copyfile(GO_RUNTIME / "go.sum", scratch / "go.sum")
    binary = scratch / "whoami"
    proc = subprocess.run(
        ["go", "build", "-trimpath", "-o", str(binary), "."],
        cwd=scratch,
        env=go_env(scratch),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"go build of the whoami program failed:\n{proc.stdout}\n{proc.stderr}")
    return binary


def _ts_fresh(compiled: Path) -> bool:
    """Whether ``compiled`` (one of dist/, which tsc writes in one go) is newer than every
    source file and the installed packages: then there is nothing to build."""
    modules = TS_RUNTIME / "node_modules" / ".package-lock.json"
    if not compiled.is_file() or not modules.is_file():
        return False
    sources = [*(TS_RUNTIME / "src").rglob("*.ts"), TS_RUNTIME / "package-lock.json", modules]
    return compiled.stat().st_mtime >= max(p.stat().st_mtime for p in sources)


@pytest.fixture(scope="module")
def ts_kube() -> Path:
    """The TypeScript runtime compiled (dist/kube.js), built unless it is up to date."""
    compiled = TS_RUNTIME / "dist" / "kube.js"
    make = shutil.which("make")
    if make is None or shutil.which("node") is None:
        pytest.fail("make and node are needed to build the TypeScript runtime")
    if _ts_fresh(compiled):
        return compiled
    proc = subprocess.run(
        [make, "-C", str(TS_RUNTIME), "deps", "build"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the TypeScript runtime failed:\n{proc.stdout}\n{proc.stderr}")
    return compiled


@pytest.fixture
def service_account(cluster: LocalCluster, namespace: str) -> str:
    """A ServiceAccount in the test's namespace; its full user name."""
    cluster.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}},
        ok=(201,),
    )
    return f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"


def exec_kubeconfig(cluster: LocalCluster, namespace: str, where: Path, api_version: str) -> str:
    """Two kubeconfig files (the cluster and context; the exec user) and the plugin with a
    fresh TokenRequest token of the ServiceAccount; the ``KUBECONFIG`` list naming them."""
    reply = cluster.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{SERVICE_ACCOUNT}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
        ok=(201,),
    )
    credential = {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "status": {
            "token": reply["status"]["token"],
            "expirationTimestamp": reply["status"]["expirationTimestamp"],
        },
    }
    plugin_dir = where / "plugin"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "credential.json").write_text(json.dumps(credential))
    plugin = plugin_dir / "get-token"
    plugin.write_text(PLUGIN)
    plugin.chmod(0o755)
    cluster_file = where / "cluster.yaml"
    cluster_file.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "exec",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": cluster.state.server,
                            "certificate-authority": str(cluster.directory / "pki" / "ca.crt"),
                        },
                    }
                ],
                "contexts": [{"name": "exec", "context": {"cluster": "local", "user": "plugin"}}],
            }
        )
    )
    user_file = where / "user.yaml"
    user_file.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [
                    {
                        "name": "plugin",
                        "user": {
                            "exec": {
                                "apiVersion": api_version,
                                # Relative to the file that names it.
                                "command": "./plugin/get-token",
                                "args": ["--namespace", namespace],
                                "interactiveMode": "Never",
                                "provideClusterInfo": True,
                            }
                        },
                    }
                ],
            }
        )
    )
    return os.pathsep.join([str(cluster_file), str(where / "missing.yaml"), str(user_file)])


def run(argv: list[str], kubeconfig: str, what: str) -> list[str]:
    """Run ``argv`` with ``KUBECONFIG`` and no in-cluster hint; the lines it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = kubeconfig
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert proc.returncode == 0, f"{what} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.split()


def runs(where: Path) -> int:
    return len((where / "plugin" / "runs").read_text().split())


@pytest.mark.parametrize("api_version", ["v1", "v1beta1"])
def test_python_runtime(
    cluster: LocalCluster,
    namespace: str,
    service_account: str,
    tmp_path: Path,
    api_version: str,
) -> None:
    kubeconfig = exec_kubeconfig(
        cluster, namespace, tmp_path, f"client.authentication.k8s.io/{api_version}"
    )
    seen = run([sys.executable, "-c", PY_MAIN % {"review": REVIEW}], kubeconfig, "python")
    assert seen == [service_account, service_account]
    assert runs(tmp_path) == 1


@pytest.mark.parametrize("api_version", ["v1", "v1beta1"])
def test_go_runtime(
    cluster: LocalCluster,
    namespace: str,
    service_account: str,
    tmp_path: Path,
    go_whoami: Path,
    api_version: str,
) -> None:
    kubeconfig = exec_kubeconfig(
        cluster, namespace, tmp_path, f"client.authentication.k8s.io/{api_version}"
    )
    seen = run([str(go_whoami)], kubeconfig, "the Go program")
    assert seen == [service_account, service_account]
    assert runs(tmp_path) == 1


@pytest.mark.parametrize("api_version", ["v1", "v1beta1"])
def test_typescript_runtime(
    cluster: LocalCluster,
    namespace: str,
    service_account: str,
    tmp_path: Path,
    ts_kube: Path,
    api_version: str,
) -> None:
    kubeconfig = exec_kubeconfig(
        cluster, namespace, tmp_path, f"client.authentication.k8s.io/{api_version}"
    )
    script = TS_MAIN % {"kube": json.dumps(str(ts_kube)), "review": json.dumps(REVIEW)}
    seen = run(["node", "-e", script], kubeconfig, "the TypeScript program")
    assert seen == [service_account, service_account]
    assert runs(tmp_path) == 1


def test_a_failing_plugin_is_named(
    cluster: LocalCluster, namespace: str, service_account: str, tmp_path: Path, go_whoami: Path
) -> None:
    """A plugin that fails: the Go program's error names the command and what it said."""
    kubeconfig = exec_kubeconfig(cluster, namespace, tmp_path, "client.authentication.k8s.io/v1")
    (tmp_path / "plugin" / "get-token").write_text("#!/bin/sh\necho 'please log in' >&2\nexit 1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = kubeconfig
    proc = subprocess.run(
        [str(go_whoami)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != 0
    assert str(tmp_path / "plugin" / "get-token") in proc.stderr, proc.stderr
    assert "please log in" in proc.stderr, proc.stderr
