"""The images' Python virtual environments, in layers: one shared, one per venv.

Every image runs ``/opt/steward/venv`` (``pyvenv.cfg`` with ``home = /usr/bin``,
``bin/python`` → ``/usr/bin/python3.11``; console scripts' shebangs name that python),
made of two layers over the base:

- **the shared layer** (:data:`SHARED`), the same bytes in every service image: the
  venv's skeleton, the third-party packages that every venv of :data:`VENVS` locks alike
  (grpcio, protobuf, opentelemetry, kubernetes, ...) and the workspace packages every one
  of them installs (``steward``, the author library). Built once, stored once in the
  archive and imported once by containerd;
- **a third-party layer**, for a venv that needs packages the others do not (the
  certificate and service-account-token controllers' cryptography and cffi; the services'
  grpcio-health-checking and grpcio-reflection with those): named by a digest of its
  requirements, so venvs that need the same packages share it;
- **a venv's own layer**: its workspace packages beyond the shared ones, under the same
  ``/opt/steward/venv`` so that the layers stack into one venv. For a controller's venv
  (one per distribution: ``steward-certificates-controllers`` serves three images) that
  is its distribution alone: its package files, its dist-info with the
  ``steward.controllers`` entry points, console scripts if any; for ``services``
  (steward-informer + steward-manager) those two and steward-serving. The services take
  the same scheme: their venv is a superset of the shared one today, and sharing it
  saves building and storing a 190 MB layer again.

What is shared is computed from the lock, not declared: ``uv export --frozen --no-dev
--no-emit-workspace`` of each venv's packages (with hashes; installed
``--require-hashes --no-deps`` for CPython 3.11 on ``x86_64-manylinux_2_36``, bookworm's
glibc), an entry shared when every venv exports it with the same text (name, version,
markers and hashes); the workspace packages are wheels built by ``uv build`` (hatchling
pinned) and installed by name from them. A file that a layer would put where a layer
below it has one is an error (the upper layer would silently replace it).

Everything is byte-compiled, as the Dockerfile does: the pods run with a read-only root
file system, so no ``.pyc`` could be written at run time and every start would compile
every module again (measured: the services' imports take about twice as long without).
Each layer compiles its own files alone (a module compiles without its neighbours).
Compilation is deterministic: the image's own interpreter (run in a chroot, so the host's
Python patch release does not matter), one process, sorted order, ``PYTHONHASHSEED=0``
and ``unchecked-hash`` pycs (no source mtimes involved).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import tomllib
from collections.abc import Iterable, Iterator
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
"""Steward's controllers, one image each (``controller-<name>``): those declared in the
registry (:mod:`steward.cluster.registry`), as the local control plane runs them. Each
image's venv is its distribution's (controllers declared by one distribution share it)."""
SERVICES = Venv("services", ("steward-informer", "steward-manager"))
"""The informer's and the manager's venv."""
VENVS = (
    SERVICES,
    *(Venv(d, (d,)) for d in sorted({c.distribution for c in CONTROLLERS})),
)
"""Every venv of the images: the services' and one per controller distribution, each
the shared layer and a layer of its own."""
SHARED = "shared"
"""The shared layer's name, as plans and layer descriptions call it."""


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


def requirement_entries(text: str) -> tuple[str, ...]:
    """The entries of an exported requirements file, in its order: each a requirement
    line with its continuation lines (its hashes), comments and blank lines dropped."""
    entries: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace():
            if not entries:
                raise ImageError(f"a continuation line opens the requirements: {line!r}")
            entries[-1].append(line)
        else:
            entries.append([line])
    return tuple("\n".join(entry) for entry in entries)


def join_requirements(entries: Iterable[str]) -> str:
    """A requirements file of ``entries`` (empty for none)."""
    return "".join(f"{entry}\n" for entry in entries)


@dataclass(frozen=True)
class LayerPlan:
    """What one layer of the venvs installs."""

    name: str
    """:data:`SHARED`, or the name of the venv whose own layer this is."""
    requirements: str
    """Third-party requirements with hashes (empty when it installs none)."""
    members: tuple[Member, ...]
    """Workspace packages it installs."""

    def describe(self) -> str:
        """What the layer holds, for its history and the build's report: its members and
        its third-party packages (their number past five)."""
        names = [_requirement_name(e) for e in requirement_entries(self.requirements)]
        held = [m.name for m in self.members]
        held += names if len(names) <= 5 else [f"{len(names)} third-party packages"]
        return f"venv {self.name}: " + (", ".join(held) or "nothing")


def _requirement_name(entry: str) -> str:
    """The distribution an exported requirement entry names (``grpcio==1.85.3 ...``)."""
    return re.split(r"[=<>!~;\s\[]", entry, maxsplit=1)[0]


@dataclass(frozen=True)
class VenvPlans:
    """The layers of every venv: the shared one; the third-party packages a venv needs
    beyond it, when any (venvs that need the same share the layer); and each venv's own,
    its workspace packages."""

    shared: LayerPlan
    third_party: dict[str, LayerPlan]
    """By venv name; only venvs with packages beyond the shared ones."""
    own: dict[str, LayerPlan]
    """By venv name."""

    def chain(self, venv: str) -> tuple[LayerPlan, ...]:
        """The layers of ``venv``'s images above the base, lowest first."""
        extra = (self.third_party[venv],) if venv in self.third_party else ()
        return (self.shared, *extra, self.own[venv])

    def layers(self, venvs: Iterable[str]) -> list[LayerPlan]:
        """The layers of ``venvs``' images above the base, each once, the shared first."""
        found: dict[str, LayerPlan] = {}
        for venv in sorted(venvs):
            for plan in self.chain(venv):
                found.setdefault(plan.name, plan)
        return list(found.values())


THIRD_PARTY = "third-party-"
"""The prefix of a third-party layer's name, then a digest of its requirements."""


def split_layers(exports: dict[str, tuple[str, tuple[Member, ...]]]) -> VenvPlans:
    """The layers of venvs given as name → (exported third-party requirements, workspace
    members): the shared layer holds the requirement entries every venv exports with the
    same text and the members every venv installs; a venv's third-party layer the rest of
    its requirements, in its export's order (named by their digest, so venvs that need
    the same packages share it); its own layer the rest of its members."""
    if not exports:
        raise ImageError("no venvs to plan")
    entries = {name: requirement_entries(text) for name, (text, _) in exports.items()}
    common = set.intersection(*(set(e) for e in entries.values()))
    common_members = set.intersection(*(set(m) for _, m in exports.values()))
    first = next(iter(entries.values()))
    shared = LayerPlan(
        SHARED,
        join_requirements(e for e in first if e in common),
        tuple(sorted(common_members, key=lambda m: m.name)),
    )
    third_party: dict[str, LayerPlan] = {}
    own: dict[str, LayerPlan] = {}
    for name, (_, members) in exports.items():
        extra = join_requirements(e for e in entries[name] if e not in common)
        if extra:
            digest = hashlib.sha256(extra.encode()).hexdigest()[:12]
            third_party[name] = LayerPlan(f"{THIRD_PARTY}{digest}", extra, ())
        mine = tuple(sorted(set(members) - common_members, key=lambda m: m.name))
        own[name] = LayerPlan(name, "", mine)
    return VenvPlans(shared, third_party, own)


def plan_venvs(uv: str, root: Path, out: Progress) -> VenvPlans:
    """The layers of :data:`VENVS`, from the lock. The shared layer is planned from every
    venv whatever a build selects, so it is the same layer in every build."""
    members = _members(root)
    exports: dict[str, tuple[str, tuple[Member, ...]]] = {}
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
        exports[venv.name] = (requirements, tuple(mine))
    plans = split_layers(exports)
    if not plans.shared.members:
        raise ImageError("the venvs share no workspace package (steward): nothing to stack on")
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


def feed_plans(inputs: InputsDigest, plans: Iterable[LayerPlan]) -> None:
    """Feed ``inputs`` what the layers of ``plans`` are made from: each one's third-party
    requirements and its members, and every member's files (once)."""
    seen: set[Path] = set()
    for plan in plans:
        inputs.feed(f"venv {plan.name}", plan.requirements.encode())
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


def install_layer(
    uv: str,
    repo: Path,
    scratch: Path,
    plan: LayerPlan,
    wheels: Path,
    out: Progress,
    *,
    python_version: str | None = None,
) -> None:
    """Install ``plan``'s layer at ``scratch`` + :data:`VENV` (where nothing is yet) and
    byte-compile it there. With ``python_version`` (the base's), the layer is the venv's
    skeleton too: ``pyvenv.cfg`` and ``bin/python``."""
    venv = scratch / VENV.lstrip("/")
    site = scratch / SITE_PACKAGES.lstrip("/")
    site.mkdir(parents=True)
    target = ["--target", str(site), "--python-version", PYTHON_VERSION]
    target += ["--python-platform", PYTHON_PLATFORM, "--no-deps", "--link-mode", "copy"]
    label = f"{plan.name}: uv pip install"
    if plan.requirements:
        requirements = scratch.parent / f"requirements-{plan.name}.txt"
        requirements.write_text(plan.requirements)
        run(
            [uv, "pip", "install", *target, "--require-hashes", "-r", str(requirements), "-q"],
            out=out,
            label=label,
            cwd=repo,
        )
    if plan.members:
        pinned = [f"{m.name}=={m.version}" for m in plan.members]
        index = ["--no-index", "--find-links", str(wheels), "--no-cache"]
        # Installed by name from the wheels (not from paths: no direct_url.json naming this
        # checkout), without uv's cache (every workspace version is the same 0.1.0).
        run(
            [uv, "pip", "install", *target, *index, "--quiet", *pinned],
            out=out,
            label=label,
            cwd=repo,
        )
    (site / ".lock").unlink(missing_ok=True)
    _scrub_dist_info(site)
    bin_dir = venv / "bin"
    if python_version is not None:
        bin_dir.mkdir()
    scripts = site / "bin"
    if scripts.is_dir():
        bin_dir.mkdir(exist_ok=True)
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
    if python_version is not None:
        (bin_dir / "python").symlink_to(PYTHON)
        (bin_dir / "python3").symlink_to("python")
        (bin_dir / f"python{PYTHON_VERSION}").symlink_to("python")
        (venv / "pyvenv.cfg").write_text(
            f"home = {Path(PYTHON).parent}\n"
            "include-system-site-packages = false\n"
            f"version = {python_version}\n"
        )
    compile_tree(scratch, SITE_PACKAGES, out=out, label=f"{plan.name}: compileall")


def conflicts(lower: dict[str, bool], upper: dict[str, bool]) -> list[str]:
    """The paths that a layer ``upper`` would replace in the layer ``lower`` below it,
    sorted: each layer given as path → whether it is a directory; a path both hold is a
    conflict unless it is a directory in both (directories merge)."""
    return sorted(p for p, is_dir in upper.items() if p in lower and not (is_dir and lower[p]))


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
