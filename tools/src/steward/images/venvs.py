"""The images' Python virtual environments: one layer each, for the base's interpreter.

**One layer per virtual environment**, the Dockerfile's split: ``services``
(steward-informer + steward-manager, with steward-serving) for the informer and the
manager, and one per controller with that controller and the author library alone. The
third-party packages are ``uv export --frozen --no-dev --no-emit-workspace`` of the
venv's packages (with hashes, installed ``--require-hashes --no-deps`` for CPython 3.11
on ``x86_64-manylinux_2_36``, bookworm's glibc); the workspace packages are wheels built
by ``uv build`` (hatchling pinned) and installed by name from them. The venv is made by
hand at ``/opt/steward/venv`` (``pyvenv.cfg`` with ``home = /usr/bin``,
``bin/python`` → ``/usr/bin/python3.11``; console scripts' shebangs name that
python). Everything is byte-compiled, as the Dockerfile does: the pods run with a
read-only root file system, so no ``.pyc`` could be written at run time and every start
would compile every module again (measured: the services' imports take about twice as
long without). Compilation is deterministic: the image's own interpreter (run in a
chroot, so the host's Python patch release does not matter), one process, sorted
order, ``PYTHONHASHSEED=0`` and ``unchecked-hash`` pycs (no source mtimes involved).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from steward.cluster import binaries
from steward.cluster.progress import Progress
from steward.cluster.registry import declared_controllers
from steward.images.base import PYTHON, PYTHON_VERSION, compile_tree
from steward.images.common import ImageError, InputsDigest, run, walk

PYTHON_PLATFORM = "x86_64-manylinux_2_36"
"""The wheels' platform: bookworm's glibc 2.36 on x86-64."""
HATCHLING = "hatchling==1.33.0"
"""The workspace packages' build backend, pinned: its metadata files are in the layers."""

VENV = "/opt/steward/venv"
"""Where every image's venv is (its ``bin/python`` the base's interpreter)."""
SITE_PACKAGES = f"{VENV}/lib/python{PYTHON_VERSION}/site-packages"


@dataclass(frozen=True)
class Venv:
    """One virtual environment of the images: the workspace packages it runs."""

    name: str
    packages: tuple[str, ...]


CONTROLLERS = declared_controllers()
"""Steward's controllers, one image each (``controller-<name>``, its venv of the same name
holding its distribution alone): those declared in the registry
(:mod:`steward.cluster.registry`), as the local control plane runs them."""
VENVS = (
    Venv("services", ("steward-informer", "steward-manager")),
    *(Venv(f"controller-{c.name}", (c.distribution,)) for c in CONTROLLERS),
)


def find_uv() -> str:
    """uv: the checkout's pinned one (``.tools/bin/uv``), else the one on PATH."""
    pinned = binaries.repo_root() / ".tools" / "bin" / "uv"
    if pinned.is_file():
        return str(pinned)
    found = shutil.which("uv")
    if found is None:
        raise ImageError("uv was not found (.tools/bin/uv or on PATH): run `make venv`")
    return found


@dataclass(frozen=True)
class Member:
    """A workspace member: its distribution name, version and directory."""

    name: str
    version: str
    path: Path


def _members(root: Path) -> dict[str, Member]:
    """Every workspace member by the directory uv export names it with (``./manager``)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    dirs = ["."]
    for entry in config["tool"]["uv"]["workspace"]["members"]:
        if any(c in entry for c in "*?["):  # a glob, as uv reads it: its member directories
            dirs += sorted(
                p.parent.relative_to(root).as_posix() for p in root.glob(f"{entry}/pyproject.toml")
            )
        else:
            dirs.append(entry)
    found: dict[str, Member] = {}
    for rel in dirs:
        project = tomllib.loads((root / rel / "pyproject.toml").read_text())["project"]
        key = "." if rel == "." else f"./{rel}"
        found[key] = Member(project["name"], project["version"], (root / rel).resolve())
    return found


def _export(uv: str, root: Path, venv: Venv, *, workspace: bool, out: Progress) -> str:
    cmd = [uv, "export", "--frozen", "--no-dev", "--format", "requirements.txt"]
    cmd += ["--no-header", "--no-annotate"]
    if workspace:
        cmd += ["--no-hashes", "--no-editable"]
    else:
        cmd += ["--no-emit-workspace"]
    for package in venv.packages:
        cmd += ["--package", package]
    return run(cmd, out=out, label=f"{venv.name}: uv export", cwd=root)


@dataclass(frozen=True)
class VenvPlan:
    venv: Venv
    requirements: str
    """Third-party requirements with hashes."""
    members: tuple[Member, ...]
    """Workspace packages it installs."""


def plan_venvs(uv: str, root: Path, out: Progress) -> list[VenvPlan]:
    members = _members(root)
    plans = []
    for venv in VENVS:
        requirements = _export(uv, root, venv, workspace=False, out=out)
        listed = _export(uv, root, venv, workspace=True, out=out)
        mine = []
        for line in listed.splitlines():
            line = line.strip()
            if line.startswith("."):
                if line not in members:
                    raise ImageError(f"uv export names {line}, not a workspace member")
                mine.append(members[line])
        if not mine:
            raise ImageError(f"uv export lists no workspace package for {venv.name}")
        plans.append(VenvPlan(venv, requirements, tuple(sorted(mine, key=lambda m: m.name))))
    return plans


def _member_files(member: Member) -> Iterator[Path]:
    """The files of a member that go into its wheel (or its metadata)."""
    yield member.path / "pyproject.toml"
    project = tomllib.loads((member.path / "pyproject.toml").read_text())["project"]
    readme = project.get("readme")
    if isinstance(readme, str):
        yield member.path / readme
    for pattern in ("LICENSE*", "LICENCE*", "COPYING*", "NOTICE*", "AUTHORS*"):
        yield from sorted(member.path.glob(pattern))
    src = member.path / "src"
    for rel in walk(src):
        parts = rel.split("/")
        if "__pycache__" in parts or rel.endswith(".pyc"):
            continue
        path = src / rel
        if path.is_file() or path.is_symlink():
            yield path


def feed_plans(inputs: InputsDigest, plans: Sequence[VenvPlan]) -> None:
    """Feed ``inputs`` what the venvs of ``plans`` are made from: each one's third-party
    requirements and its members, and every member's files (once)."""
    seen: set[Path] = set()
    for plan in plans:
        inputs.feed(f"venv {plan.venv.name}", plan.requirements.encode())
        for member in plan.members:
            inputs.feed("member", member.name.encode())
            if member.path in seen:
                continue
            seen.add(member.path)
            for path in _member_files(member):
                rel = str(path.relative_to(member.path))
                if path.is_symlink():
                    inputs.feed(f"{member.name}:{rel}->", os.readlink(path).encode())
                else:
                    inputs.feed(f"{member.name}:{rel}", path.read_bytes())


def build_wheels(uv: str, root: Path, members: Iterable[Member], dest: Path, out: Progress) -> None:
    constraints = dest.parent / "build-constraints.txt"
    constraints.write_text(HATCHLING + "\n")
    for member in sorted(set(members), key=lambda m: m.name):
        run(
            [
                uv,
                "build",
                "--wheel",
                "--package",
                member.name,
                "--out-dir",
                str(dest),
                "--build-constraints",
                str(constraints),
                "--no-create-gitignore",
                "--quiet",
            ],
            out=out,
            label=f"uv build {member.name}",
            cwd=root,
        )


def install_venv(
    uv: str,
    repo: Path,
    scratch: Path,
    plan: VenvPlan,
    wheels: Path,
    python_version: str,
    out: Progress,
) -> None:
    """Install ``plan``'s venv at ``scratch`` + :data:`VENV` and byte-compile it there."""
    venv = scratch / VENV.lstrip("/")
    site = scratch / SITE_PACKAGES.lstrip("/")
    site.mkdir(parents=True)
    requirements = scratch.parent / f"requirements-{plan.venv.name}.txt"
    requirements.write_text(plan.requirements)
    target = ["--target", str(site), "--python-version", PYTHON_VERSION]
    target += ["--python-platform", PYTHON_PLATFORM, "--no-deps", "--link-mode", "copy"]
    label = f"{plan.venv.name}: uv pip install"
    run(
        [uv, "pip", "install", *target, "--require-hashes", "-r", str(requirements), "--quiet"],
        out=out,
        label=label,
        cwd=repo,
    )
    pinned = [f"{m.name}=={m.version}" for m in plan.members]
    # Installed by name from the wheels (not from paths: no direct_url.json naming this
    # checkout), without uv's cache (every workspace version is the same 0.1.0).
    run(
        [
            uv,
            "pip",
            "install",
            *target,
            "--no-index",
            "--find-links",
            str(wheels),
            "--no-cache",
            "--quiet",
            *pinned,
        ],
        out=out,
        label=label,
        cwd=repo,
    )
    (site / ".lock").unlink(missing_ok=True)
    _scrub_dist_info(site)
    bin_dir = venv / "bin"
    bin_dir.mkdir()
    scripts = site / "bin"
    if scripts.is_dir():
        moved: dict[str, str] = {}
        for script in sorted(scripts.iterdir()):
            data = script.read_bytes()
            if data.startswith(b"#!"):
                data = f"#!{VENV}/bin/python".encode() + data[data.index(b"\n") :]
            (bin_dir / script.name).write_bytes(data)
            (bin_dir / script.name).chmod(0o755)
            moved[script.name] = _record_entry(f"../../../bin/{script.name}", data)
        shutil.rmtree(scripts)
        _rerecord_scripts(site, moved)
    (bin_dir / "python").symlink_to(PYTHON)
    (bin_dir / "python3").symlink_to("python")
    (bin_dir / f"python{PYTHON_VERSION}").symlink_to("python")
    (venv / "pyvenv.cfg").write_text(
        f"home = {Path(PYTHON).parent}\n"
        "include-system-site-packages = false\n"
        f"version = {python_version}\n"
    )
    compile_tree(scratch, SITE_PACKAGES, out=out, label=f"{plan.venv.name}: compileall")


def _record_entry(path: str, data: bytes) -> str:
    """A RECORD line (PEP 376/627): path, urlsafe-base64 sha256 without padding, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _rerecord_scripts(site: Path, moved: dict[str, str]) -> None:
    """Point RECORD's lines of the console scripts at where they now are, with their
    rewritten content's hash: as uv wrote them they held the install's own (this
    checkout's) path in the shebang, which made the layers differ between checkouts."""
    for record in sorted(site.glob("*.dist-info/RECORD")):
        lines = record.read_text().splitlines()
        changed = []
        for line in lines:
            path = line.split(",", 1)[0]
            name = path.removeprefix("bin/") if path.startswith("bin/") else ""
            changed.append(moved.get(name, line))
        if changed != lines:
            record.write_text("".join(f"{line}\n" for line in changed))


_INSTALL_NOISE = ("uv_cache.json", "direct_url.json")
"""What uv writes into a dist-info that names this machine or this install's time: uv's
cache record of a local wheel (its file's mtime) and a direct URL (a path)."""


def _scrub_dist_info(site: Path) -> None:
    """Remove :data:`_INSTALL_NOISE` from every dist-info, and its lines from RECORD."""
    for dist_info in sorted(site.glob("*.dist-info")):
        noise = [name for name in _INSTALL_NOISE if (dist_info / name).exists()]
        if not noise:
            continue
        for name in noise:
            (dist_info / name).unlink()
        record = dist_info / "RECORD"
        if record.is_file():
            prefixes = tuple(f"{dist_info.name}/{name}," for name in noise)
            kept = [
                line for line in record.read_text().splitlines() if not line.startswith(prefixes)
            ]
            record.write_text("".join(f"{line}\n" for line in kept))
