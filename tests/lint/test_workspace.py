"""The root pyproject.toml's lists of source roots agree with the uv workspace: every
member's ``src/`` is type-checked by mypy (``files``, globs expanded as mypy does), can be
imported by it (``mypy_path``, which mypy does not glob: the one list kept by hand) and is
a root of the import contracts (``roots``, globs expanded as scripts/check-imports.py
does). A new controller under services/controllers is covered by the globs; only
``mypy_path`` needs its line, and this test names it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _expand(patterns: list[str]) -> set[str]:
    found: set[str] = set()
    for pattern in patterns:
        matched = sorted(ROOT.glob(pattern)) if "*" in pattern else [ROOT / pattern]
        found.update(str(p.relative_to(ROOT)) for p in matched if p.exists())
    return found


def _member_sources() -> set[str]:
    members = _expand(PYPROJECT["tool"]["uv"]["workspace"]["members"])
    return {"src"} | {f"{m}/src" for m in members if (ROOT / m / "src").is_dir()}


def test_every_controller_directory_is_a_workspace_member() -> None:
    members = _expand(PYPROJECT["tool"]["uv"]["workspace"]["members"])
    controllers = {str(p.relative_to(ROOT)) for p in (ROOT / "services" / "controllers").iterdir()}
    assert {c for c in controllers if (ROOT / c / "pyproject.toml").exists()} <= members


def test_every_source_root_is_checked_by_mypy_and_the_import_contracts() -> None:
    sources = _member_sources()
    mypy = PYPROJECT["tool"]["mypy"]
    missing_path = sorted(sources - set(mypy["mypy_path"]))
    assert not missing_path, f"add to [tool.mypy] mypy_path: {missing_path}"
    assert sources <= _expand(mypy["files"])
    roots = PYPROJECT["tool"]["steward"]["import-contracts"]["roots"]
    assert _expand(roots) == sources
