"""The Markdown link checker (scripts/check-links.py, run by `make lint`): a scratch
repository whose relative links and anchors all resolve passes, and a broken file link or
a broken anchor fails it, named by file and line; links inside code, and links to other
sites, are not checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "scripts" / "check-links.py"

GUIDE = """\
# The guide

## Set-up: `make up` (PODS=1)

## Set-up: `make up` (PODS=1)

Text.
"""

README = """\
# Repo

See [the guide](docs/guide.md), [its set-up](docs/guide.md#set-up-make-up-pods1), the
[second one](docs/guide.md#set-up-make-up-pods1-1), [the docs](docs/) and
[below](#layout). Elsewhere: [upstream](https://kubernetes.io/docs/), [mail](mailto:a@b.c).

`[not a link](missing.md)` inside a code span.

```md
[not a link either](missing.md)
```

## Layout
"""


def _repo(tmp_path: Path, readme: str) -> Path:
    """A git repository holding README.md and docs/guide.md, both tracked."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(GUIDE)
    (tmp_path / "README.md").write_text(readme)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "README.md", "docs"], check=True)
    return tmp_path


def _check(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_good_links_pass(tmp_path: Path) -> None:
    result = _check(_repo(tmp_path, README))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 relative links in 2 Markdown files" in result.stdout


def test_a_missing_file_fails(tmp_path: Path) -> None:
    result = _check(_repo(tmp_path, README + "\nAnd [gone](docs/gone.md).\n"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["README.md:15: broken link docs/gone.md (no such file)"]


def test_a_missing_anchor_fails(tmp_path: Path) -> None:
    broken = README + "\n[Set up](docs/guide.md#setup) and [here](#nowhere).\n"
    result = _check(_repo(tmp_path, broken))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "README.md:15: broken link docs/guide.md#setup (no such heading)",
        "README.md:15: broken link #nowhere (no such heading)",
    ]


def test_this_repository_passes() -> None:
    result = _check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
