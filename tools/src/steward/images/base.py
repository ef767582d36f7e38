"""The base layer: Debian's Python and the libraries it links, the service images' root.

**Base layer** (shared by the nine service images): Debian bookworm's own ``python3.11``
(the project venv's minor, so the locked wheels fit) and the libraries it and the wheels
link (``libstdc++6``), from ``mmdebstrap --variant=extract``: the packages' files
without maintainer scripts, so no shell, apt, dpkg or perl (measured: 50 MB of files
against 170 MB for ``--variant=minbase`` and 150 MB for ``essential``; 62 MB with the
standard library's bytecode, 23 MB compressed).
``install-info`` stands in for ``readline-common``'s ``dpkg | install-info``.
What the maintainer scripts would have done and a runtime needs is done here: the
standard library byte-compiled; and ``/etc/passwd``, ``/etc/group`` (root, nobody,
nonroot 65532) and ``/etc/nsswitch.conf`` written. Removed: apt's and dpkg's
configuration and database (one ``/var/lib/dpkg/status.d/<package>`` control file per
package is kept, as distroless images do, for scanners), caches, logs, docs (the
``copyright`` files stay), man pages, locales and the host's ``/etc/hostname`` and
``/etc/resolv.conf``. Built once per machine and cached under
``cache_root()/images/base-<digest>`` (digest of the packages, sources, mmdebstrap
arguments, the builder's recipe version and the epoch); bookworm's mirror (main,
updates, security) is the one input not pinned, so a base built later may carry newer
Debian packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steward.cluster.progress import Progress
from steward.images.common import (
    RECIPE_VERSION,
    ImageError,
    images_root,
    prune,
    require_root,
    require_tools,
    run,
    source_date_epoch,
)
from steward.images.layout import write_tar

SUITE = "bookworm"
SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3.11", "libstdc++6", "install-info")
"""Debian's python3.11 (with its standard library), libstdc++ for grpcio's and protobuf's
extensions, and install-info, so that readline-common's ``dpkg | install-info`` does not
bring dpkg, tar and their libraries."""

_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
_MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/merged-usr/setup00.sh"
# Runs on the host with the root file system as $1, before the cleanup removes the
# downloaded packages: one control file per package, distroless' status.d convention.
_STATUS_HOOK = (
    'mkdir -p "$1/var/lib/dpkg/status.d" && '
    'for deb in "$1"/var/cache/apt/archives/*.deb; do '
    'p=$(dpkg-deb --field "$deb" Package) && '
    'dpkg-deb --field "$deb" > "$1/var/lib/dpkg/status.d/$p" || exit 1; done'
)

PYTHON = "/usr/bin/python3.11"
"""The images' interpreter, Debian's."""
PYTHON_VERSION = "3.11"

_USERS = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n"
)
_GROUP = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
_NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"

# Removed from the base after mmdebstrap (paths relative to the root; a trailing "/*"
# empties a directory and keeps it).
_BASE_REMOVE = (
    "etc/apt",
    "etc/dpkg",
    "etc/hostname",
    "etc/resolv.conf",
    "dev/*",
    "var/cache/*",
    "var/log/*",
    "var/lib/apt",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
)


def _remove(root: Path, pattern: str) -> None:
    if pattern.endswith("/*"):
        parent = root / pattern[:-2]
        if parent.is_dir() and not parent.is_symlink():
            for child in parent.iterdir():
                _remove_path(child)
        return
    _remove_path(root / pattern)


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def chroot(root: Path, argv: Sequence[str], *, out: Progress, label: str) -> str:
    """Run ``argv`` in the chroot ``root`` with a fixed environment."""
    chroot = shutil.which("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin")
    if chroot is None:
        raise ImageError("chroot (coreutils) was not found")
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
    return run([chroot, str(root), *argv], out=out, label=label, env=env)


def compile_tree(root: Path, directory: str, *, out: Progress, label: str) -> None:
    """Byte-compile ``directory`` (a path inside ``root``) with the image's interpreter:
    one process in sorted order, unchecked-hash pycs, reproducible."""
    chroot(
        root,
        [
            PYTHON,
            "-S",
            "-m",
            "compileall",
            "-q",
            "-f",
            "--invalidation-mode",
            "unchecked-hash",
            directory,
        ],
        out=out,
        label=label,
    )


@dataclass(frozen=True)
class Base:
    """The cached base layer."""

    key: str
    layer: Path
    """The uncompressed layer tar."""
    diff_id: str
    size: int
    python_version: str
    packages: dict[str, str]


def _mmdebstrap_args(tarball: Path) -> list[str]:
    args = [
        "mmdebstrap",
        "--mode=root",
        "--variant=extract",
        f"--include={','.join(BASE_PACKAGES)}",
        # Nothing runs inside the chroot (hooks run on the host), so nothing is mounted
        # there: an interrupted build leaves no mount behind for the clean-up to walk into.
        "--skip=chroot/mount",
        '--aptopt=Acquire::Retries "3"',
        f"--setup-hook={_MERGED_USR_HOOK}",
        f"--extract-hook={_STATUS_HOOK}",
        *(f"--dpkgopt={opt}" for opt in _DPKG_EXCLUDES),
        SUITE,
        str(tarball),
        *SOURCES,
    ]
    return args


def base_key(epoch: int) -> str:
    """Digest of what the base is made from (the mirror's content aside)."""
    recipe = {
        "mmdebstrap": _mmdebstrap_args(Path("OUT")),
        "remove": _BASE_REMOVE,
        "files": [_USERS, _GROUP, _NSSWITCH],
        "recipe": RECIPE_VERSION,
        "epoch": epoch,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def build_extracted_layer(
    *,
    label: str,
    directory: Path,
    layer: str,
    meta: Path,
    key: str,
    epoch: int,
    mmdebstrap: Callable[[Path], list[str]],
    finish: Callable[[Path], dict[str, Any]],
    out: Progress,
) -> dict[str, Any]:
    """A tree of Debian packages as one reproducible layer in the cache: ``mmdebstrap``
    (its arguments for an output tarball) extracts the packages, the tarball is unpacked
    without device nodes, ``finish`` completes the tree and returns what to keep of it;
    the tree is written as ``directory/layer`` (every time set to ``epoch``) and ``meta``
    holds ``key``, the layer's ``diff_id`` and size, the build's seconds and what
    ``finish`` returned, which this returns too. The work happens in a temporary
    directory of the cache, so a build cut short leaves no layer behind."""
    require_tools(("mmdebstrap",), out)
    images_root().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".tmp-{label}-", dir=images_root()) as tmp:
        raw = Path(tmp) / "mmdebstrap.tar"
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "TMPDIR": tmp}
        run(mmdebstrap(raw), out=out, label=f"{label}: mmdebstrap", env=env)
        out.say(f"{label}: mmdebstrap done in {time.monotonic() - started:.0f}s; finishing it")
        root = Path(tmp) / "root"
        root.mkdir()
        run(
            ["tar", "-x", "-f", str(raw), "-C", str(root), "--numeric-owner", "--exclude=./dev/*"],
            out=out,
            label=f"{label}: unpack",
        )
        raw.unlink()
        kept = finish(root)
        staging = Path(tmp) / layer
        diff_id, size = write_tar(staging, root, epoch=epoch)
        directory.mkdir(parents=True, exist_ok=True)
        staging.replace(directory / layer)
        data = {
            "key": key,
            "diff_id": f"sha256:{diff_id}",
            "size": size,
            "built_seconds": round(time.monotonic() - started, 1),
            **kept,
        }
        meta.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def ensure_base(*, out: Progress, epoch: int | None = None, rebuild: bool = False) -> Base:
    """The base layer, built with mmdebstrap into the cache when missing (or ``rebuild``)."""
    epoch = source_date_epoch() if epoch is None else epoch
    key = base_key(epoch)
    directory = images_root() / f"base-{key[:16]}"
    meta = directory / "base.json"
    if meta.is_file() and (directory / "base.tar").is_file() and not rebuild:
        data = json.loads(meta.read_text())
        return Base(
            key=key,
            layer=directory / "base.tar",
            diff_id=data["diff_id"],
            size=data["size"],
            python_version=data["python_version"],
            packages=data["packages"],
        )
    require_root("building the base layer")
    started = time.monotonic()
    out.say(
        f"base: mmdebstrap --variant=extract {SUITE} ({', '.join(BASE_PACKAGES)}) from "
        "deb.debian.org: once per machine, about 15-60 s"
    )
    data = build_extracted_layer(
        label="base",
        directory=directory,
        layer="base.tar",
        meta=meta,
        key=key,
        epoch=epoch,
        mmdebstrap=_mmdebstrap_args,
        finish=lambda root: _finished_base(root, out),
        out=out,
    )
    prune(images_root(), keep=2, prefix="base-")
    out.say(
        f"base: {len(data['packages'])} packages, Python {data['python_version']}, "
        f"{data['size'] / 1e6:.1f} MB, built in {time.monotonic() - started:.0f}s ({directory})"
    )
    return ensure_base(out=out, epoch=epoch)


def prune_extracted(root: Path, patterns: Sequence[str]) -> None:
    """What an extracted tree does not need: ``patterns``, dpkg's state but its
    ``status.d``, and each package's documentation but its copyright file."""
    for pattern in patterns:
        _remove(root, pattern)
    dpkg = root / "var/lib/dpkg"
    if dpkg.is_dir():
        for child in dpkg.iterdir():
            if child.name != "status.d":
                _remove_path(child)
    docs = root / "usr/share/doc"
    if docs.is_dir():
        for doc in docs.iterdir():
            if doc.is_symlink() or not doc.is_dir():
                _remove_path(doc)
                continue
            for child in doc.iterdir():
                if child.name != "copyright":
                    _remove_path(child)


def _finished_base(root: Path, out: Progress) -> dict[str, Any]:
    """:func:`_finish_base`'s outcome, as the base layer's metadata keeps it."""
    python_version, packages = _finish_base(root, out)
    return {"python_version": python_version, "packages": packages}


def _finish_base(root: Path, out: Progress) -> tuple[str, dict[str, str]]:
    """What the skipped maintainer scripts and a runtime need, and the removals."""
    prune_extracted(root, _BASE_REMOVE)
    for name, text in (("passwd", _USERS), ("group", _GROUP), ("nsswitch.conf", _NSSWITCH)):
        (root / "etc" / name).write_text(text)
    for name in ("proc", "sys", "run", "tmp"):
        (root / name).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    compile_tree(root, f"/usr/lib/python{PYTHON_VERSION}", out=out, label="base: compileall")
    version = chroot(
        root,
        [PYTHON, "-S", "-c", "import platform; print(platform.python_version())"],
        out=out,
        label="base: python",
    ).strip()
    pkgs: dict[str, str] = {}
    status = root / "var/lib/dpkg/status.d"
    for control in sorted(status.iterdir()) if status.is_dir() else []:
        fields = dict(
            line.split(": ", 1)
            for line in control.read_text().splitlines()
            if ": " in line and not line.startswith(" ")
        )
        pkgs[fields.get("Package", control.name)] = fields.get("Version", "?")
    if "python3.11" not in pkgs:
        raise ImageError(f"the base has no python3.11 package: {sorted(pkgs)}")
    return version, pkgs
