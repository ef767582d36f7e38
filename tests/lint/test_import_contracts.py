"""The import-layer contracts of pyproject.toml ([tool.steward.import-contracts]), as
scripts/check-imports.py checks them in `make lint`: the real tree keeps every contract,
and a copy of it with one forbidden import added breaks exactly the contract it should,
whatever the import's form (module level or inside a function, `import a.b`, `from a
import b`, relative, importlib)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "scripts" / "check-imports.py"
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["steward"][
    "import-contracts"
]


def _check(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the checkout's pyproject.toml and of every part of the package."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for root in sorted({p for pattern in CONTRACTS["roots"] for p in ROOT.glob(pattern)}):
        shutil.copytree(
            root / "steward",
            tmp_path / root.relative_to(ROOT) / "steward",
            ignore=lambda _dir, names: [
                n for n in names if n == "__pycache__" or n.endswith((".pyc", ".json"))
            ],
        )
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    done = _check(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"check-imports: {len(CONTRACTS['contract'])} contracts kept" in done.stdout
    assert "BROKEN" not in done.stdout


LAZY = "\n\ndef _added() -> None:\n    {}\n"
MODULE = "\n{}\n"

# contract, file (under the tree), where the import goes, the import, what it imports
CASES = [
    (
        "author-library",
        "src/steward/kube.py",
        MODULE,
        "from steward.serving import serve_until_signalled",
        "steward.serving",
    ),
    (
        "author-library",
        "src/steward/runtime/session.py",
        LAZY,
        "import steward.cluster.pki",
        "steward.cluster.pki",
    ),
    ("author-library", "src/steward/__init__.py", MODULE, "from steward import cli", "steward.cli"),
    (
        "author-library",
        "src/steward/runtime/workqueue.py",
        LAZY,
        "from ..informer import server",
        "steward.informer",
    ),
    (
        "author-library",
        "src/steward/security.py",
        MODULE,
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from steward.serving.security import Guard",
        "steward.serving.security",
    ),
    (
        "controllers-on-the-library",
        "services/controllers/job/src/steward/controllers/job/controller.py",
        MODULE,
        "from steward.serving.security import DEVELOPMENT",
        "steward.serving.security",
    ),
    (
        "controllers-on-the-library",
        "services/controllers/deployment/src/steward/controllers/deployment/rollout.py",
        LAZY,
        'import importlib; importlib.import_module("steward.manager.registry")',
        "steward.manager.registry",
    ),
    (
        "controllers-independent",
        "services/controllers/replicaset/src/steward/controllers/replicaset/sync.py",
        MODULE,
        "from steward.controllers.job import pods",
        "steward.controllers.job",
    ),
    (
        "controllers-independent",
        "services/controllers/deployment/src/steward/controllers/deployment/controller.py",
        LAZY,
        "from ..replicaset import ranking",
        "steward.controllers.replicaset",
    ),
    (
        "services-without-tools",
        "services/informer/src/steward/informer/server.py",
        LAZY,
        "from steward import cluster",
        "steward.cluster",
    ),
    (
        "services-without-tools",
        "services/serving/src/steward/serving/security.py",
        MODULE,
        "import steward.traces",
        "steward.traces",
    ),
    (
        "serving-below-services",
        "services/serving/src/steward/serving/__init__.py",
        MODULE,
        "from steward.manager.registry import Registry",
        "steward.manager.registry",
    ),
    (
        "services-independent",
        "manager/src/steward/manager/service.py",
        LAZY,
        "from steward.informer import InformerOptions",
        "steward.informer",
    ),
]


def test_every_contract_has_a_violation_case() -> None:
    assert {c["name"] for c in CONTRACTS["contract"]} == {case[0] for case in CASES}


@pytest.mark.parametrize(
    ("contract", "path", "where", "statement", "target"),
    CASES,
    ids=[f"{c[0]}:{Path(c[1]).name}:{c[3].split()[0]}" for c in CASES],
)
def test_a_forbidden_import_breaks_its_contract(
    tree: Path, contract: str, path: str, where: str, statement: str, target: str
) -> None:
    file = tree / path
    before = file.read_text().count("\n")
    with file.open("a") as f:
        f.write(where.format(statement))
    done = _check(tree)
    print(done.stdout, done.stderr)
    assert done.returncode == 1, done.stdout + done.stderr
    violations = [line for line in done.stdout.splitlines() if line.endswith(f"[{contract}]")]
    assert len(violations) == 1, done.stdout
    location, _, rest = violations[0].partition(": ")
    name, _, line = location.rpartition(":")
    assert name == path
    assert int(line) > before
    assert f" imports {target}" in rest
    total = len(CONTRACTS["contract"])
    assert f"check-imports: 1 of {total} contracts broken: {contract}\n" in done.stdout


def test_allowed_imports_pass(tree: Path) -> None:
    """What the layers allow: serving on the runtime, the tools on everything."""
    additions = {
        "services/serving/src/steward/serving/__init__.py": "from steward.runtime import health",
        "tools/src/steward/traces.py": "from steward.manager import server",
        "manager/src/steward/manager/service.py": "from steward.serving import tracing",
    }
    for path, statement in additions.items():
        with (tree / path).open("a") as f:
            f.write(LAZY.format(statement))
    done = _check(tree)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_new_controller_is_covered_without_changing_the_contracts(tree: Path) -> None:
    """A directory more under services/controllers is a root and a controller of the
    independence contract by the patterns alone."""
    package = tree / "services/controllers/newcomer/src/steward/controllers/newcomer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from steward.controllers.job import sync\n")
    done = _check(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "services/controllers/newcomer/src/steward/controllers/newcomer/__init__.py:1: "
        "steward.controllers.newcomer imports steward.controllers.job [controllers-independent]"
    ) in done.stdout


def test_a_root_pattern_matching_nothing_is_an_error(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    head, table, contracts = pyproject.read_text().partition("[tool.steward.import-contracts]")
    contracts = contracts.replace('"services/controllers/*/src",', '"services/gone/*/src",', 1)
    pyproject.write_text(head + table + contracts)
    done = _check(tree)
    assert done.returncode == 2
    assert "root services/gone/*/src matches no directory" in done.stderr


def test_a_contract_naming_no_module_is_an_error(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace('"steward.deepjson",', '"steward.deepjsn",', 1))
    done = _check(tree)
    assert done.returncode == 2
    assert "contract author-library names steward.deepjsn: no such module" in done.stderr
