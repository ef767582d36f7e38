"""Steward's container images, built without a daemon or registry (``make images``).

``build_images()`` writes one OCI image-layout archive (a tar) that holds every image of
Steward, with their blobs shared, for a node's containerd to import with
``ctr -n k8s.io images import <archive>`` (:func:`import_into_containerd`):

=================================================  ===============================================
image (as containerd lists it)                     entry point
=================================================  ===============================================
docker.io/library/steward-informer:TAG             python -m steward.informer
docker.io/library/steward-manager:TAG              python -m steward.manager
…/steward-controller-job:TAG                       python -m steward.controllers.job.main
…/steward-controller-replicaset:TAG                python -m steward.controllers.replicaset.main
…/steward-controller-deployment:TAG                python -m steward.controllers.deployment.main
…/steward-controller-endpoint:TAG                  python -m steward.controllers.endpoints.main
…/steward-controller-endpointslice:TAG             python -m steward.controllers.endpointslice.main
…/steward-controller-daemonset:TAG                 python -m steward.controllers.daemonset.main
…/steward-controller-horizontalpodautoscaling:TAG  python -m steward.controllers.hpa.main
registry.k8s.io/pause:3.10.2                       /pause (only with ``pause_binary``)
=================================================  ===============================================

:func:`build_pause_archive` writes an archive of the pause image alone (no root needed).

:func:`build_e2e_archive` (``python -m steward.images --e2e``) writes another archive: the
images upstream's e2e specs ``[sig-apps] Job``, ``Deployment`` and ``ReplicaSet``
``[Conformance]`` run, under the exact names e2e expects (:data:`E2E_IMAGES`), so that a
real node needs no registry:

================================================  ==========================================
image                                             what it is
================================================  ==========================================
registry.k8s.io/e2e-test-images/busybox:1.37.0-2  Debian's busybox-static (1.35), not 1.37
registry.k8s.io/e2e-test-images/agnhost:2.66.1    our build of agnhost, busybox for a shell
registry.k8s.io/e2e-test-images/agnhost:2.55      the same manifest as 2.66.1
registry.k8s.io/pause:3.10.2                      Steward's pause, as build_pause_archive's
================================================  ==========================================

- **busybox**: one layer: ``/bin/busybox`` (the host's ``/bin/busybox`` of Debian's
  ``busybox-static``, a static binary) and every applet of ``busybox --list`` a symbolic
  link to it in ``/bin``; ``/etc/passwd`` and ``/etc/group`` with root and nobody;
  ``/tmp`` 1777; busybox's copyright file. Configured as upstream's: runs as root (no
  user set), no working directory, no entry point, ``Cmd ["sh"]``, upstream's ``PATH``.
  Debian's busybox 1.35 ``sh`` drops environment variables whose names contain ``-``
  (its children do not see them; a program started without the shell does): four
  ``[sig-node]`` conformance specs check such variables, none of the ``[sig-apps]`` ones.
- **agnhost**: busybox's layer (upstream's image has a shell; specs run ``sh -c`` in it)
  and one of its own, as upstream's Dockerfile (``test/images/agnhost/Dockerfile`` of the
  ``k8s.io/kubernetes`` module) adds: ``/agnhost`` (a static build, CGO off, of the
  pinned v1.37.2 module's ``test/images/agnhost``, whose VERSION is 2.66.1), the
  ``/agnhost-2`` link, ``/uploads``, and the users ``user-defined-in-image`` (1000) in
  ``group-defined-in-image`` (50000), plus Alpine's ``/var/tmp`` (1777);
  ``Entrypoint ["/agnhost"]``, ``Cmd ["pause"]`` and upstream's exposed ports (80, 8080,
  8081, 9376, 5000). **Both agnhost names carry
  this one build**: the Deployment specs roll from 2.55 to 2.66.1, and only need the two
  to be different names that run. Not included from upstream's Alpine image: its
  packages (bind-tools, curl, iproute2, iperf, bash, socat …), CoreDNS 1.6.2, porter's
  certificate and the fake registry's content, which the ``[sig-apps]`` specs do not use;
  the user's home directory is owned by root.
- The layers and the archive are written as Steward's (:func:`write_tar`, umoci); the
  result is cached in ``cache_root()/images/e2e/<digest>/`` by a digest of the agnhost,
  pause and busybox binaries, busybox's copyright file, the recipe
  (:data:`E2E_RECIPE_VERSION`, names, configurations) and the epoch, and a cached result
  returns without waiting for the images' lock. Building needs umoci and busybox-static,
  not root, and takes a few seconds.

The images follow ``deploy/images/Dockerfile``'s targets, built another way:

- **Base layer** (shared by the nine service images): Debian bookworm's own ``python3.11``
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
  arguments, this module's recipe version and the epoch); bookworm's mirror (main,
  updates, security) is the one input not pinned, so a base built later may carry newer
  Debian packages.
- **One layer per virtual environment**, the Dockerfile's split: ``services``
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
- **Configuration** as the Dockerfile's runtime stage: user ``65532:65532``, working
  directory ``/tmp``, ``PATH=/opt/steward/venv/bin:/usr/bin:/bin``,
  ``PYTHONDONTWRITEBYTECODE=1``, ``PYTHONUNBUFFERED=1``, ``HOME=/tmp``, ``TMPDIR=/tmp``;
  the entry point in exec form. Every file is owned by root and not writable by group or
  others (``/tmp`` alone is ``1777``); nothing in the image needs to be writable.
- **Layers and archive** are written deterministically (:func:`write_tar`): parents
  before children and names in byte order, uid/gid 0, mtime ``SOURCE_DATE_EPOCH``
  (default 0), modes normalised (0755 for directories and executables, 0644 otherwise),
  PAX headers only for long names (no times). umoci (``raw add-layer``, ``config``)
  compresses the layers (in parallel: about 1.3 s for a 200 MB venv) and writes the
  manifests and configs; its output was measured byte-for-byte reproducible once every
  timestamp is given, so building twice from the same inputs gives the same manifest
  digests and the same archive.
  The index then names each manifest ``io.containerd.image.name`` (what ``ctr images
  import`` uses) and ``org.opencontainers.image.ref.name`` = TAG.

Results are cached by a digest of the inputs (the recipe, the base, each venv's exported
requirements, the workspace members' pyproject files, readmes and sources, uv's version,
the tag, the epoch, the pause binary) in ``cache_root()/images/archives/<digest>/``: a
second call with nothing changed returns at once. A change rebuilds every venv (about a
minute on two cores, mostly byte-compilation); the base stays.
Building needs root (mmdebstrap's root mode, chroot), mmdebstrap and umoci (Debian
packages), and uv (``make venv``).

``python -m steward.images --help`` is the command line (``make images`` runs it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from steward.cluster import binaries, packages
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress
from steward.cluster.registry import declared_controllers

RECIPE_VERSION = "2"
"""Bumped when what the builder produces changes in a way its inputs do not show."""

DEFAULT_TAG = "dev"
DEFAULT_EPOCH = 0
"""File mtimes and the images' ``created`` when ``SOURCE_DATE_EPOCH`` is not set."""

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
PYTHON_VERSION = "3.11"
PYTHON_PLATFORM = "x86_64-manylinux_2_36"
"""The wheels' platform: bookworm's glibc 2.36 on x86-64."""
HATCHLING = "hatchling==1.33.0"
"""The workspace packages' build backend, pinned: its metadata files are in the layers."""

VENV = "/opt/steward/venv"
SITE_PACKAGES = f"{VENV}/lib/python{PYTHON_VERSION}/site-packages"
USER = "65532:65532"
ENV = (
    ("PATH", f"{VENV}/bin:/usr/bin:/bin"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTHONUNBUFFERED", "1"),
    ("HOME", "/tmp"),  # noqa: S108 (the emptyDir the pods mount)
    ("TMPDIR", "/tmp"),  # noqa: S108
)
WORKDIR = "/tmp"  # noqa: S108

PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
PAUSE_USER = "65535:65535"

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


class ImageError(ClusterError):
    """Building or importing the images failed; the message says where."""


@dataclass(frozen=True)
class Venv:
    """One virtual environment of the images: the workspace packages it runs."""

    name: str
    packages: tuple[str, ...]


@dataclass(frozen=True)
class ImageSpec:
    """One service image: its name, the venv it runs from, the module it runs."""

    service: str
    venv: str
    module: str

    @property
    def name(self) -> str:
        return f"steward-{self.service}"

    def ref(self, tag: str) -> str:
        """The name containerd lists (``steward-informer:dev`` normalised)."""
        return f"docker.io/library/{self.name}:{tag}"

    def entrypoint(self) -> list[str]:
        return [f"{VENV}/bin/python", "-m", self.module]


CONTROLLERS = declared_controllers()
"""Steward's controllers, one image each (``controller-<name>``, its venv of the same name
holding its distribution alone): those declared in the registry
(:mod:`steward.cluster.registry`), as the local control plane runs them."""
VENVS = (
    Venv("services", ("steward-informer", "steward-manager")),
    *(Venv(f"controller-{c.name}", (c.distribution,)) for c in CONTROLLERS),
)
IMAGES = (
    ImageSpec("informer", "services", "steward.informer"),
    ImageSpec("manager", "services", "steward.manager"),
    *(ImageSpec(f"controller-{c.name}", f"controller-{c.name}", c.module) for c in CONTROLLERS),
)


@dataclass(frozen=True)
class Layer:
    """One layer blob of the archive."""

    digest: str
    """Digest of the compressed blob (what manifests name)."""
    size: int
    """Bytes of the compressed blob."""
    diff_id: str
    """Digest of the uncompressed tar."""
    unpacked_size: int
    """Bytes of the uncompressed tar."""
    description: str


@dataclass(frozen=True)
class ImageInfo:
    """One image of the archive."""

    name: str
    digest: str
    """The manifest's digest."""
    size: int
    """Bytes of the image in the archive: manifest, config and compressed layers."""
    unpacked_size: int
    """Bytes of its layers uncompressed."""
    layers: tuple[str, ...]
    """Digests of its layers, base first."""


@dataclass(frozen=True)
class BuiltImages:
    """What :func:`build_images` made."""

    archive: Path
    """The OCI image-layout tar holding every image."""
    images: dict[str, ImageInfo]
    """By the name containerd lists, e.g. ``docker.io/library/steward-informer:dev``."""
    layers: dict[str, Layer]
    """Every layer blob, by digest (the base layer is shared by the service images)."""
    seconds: float
    """Time this call took (a cached result takes well under a second)."""
    cached: bool
    """True when the archive came from the cache, unchanged inputs."""
    key: str
    """Digest of the inputs."""
    base_key: str
    base_packages: dict[str, str]
    """The base's Debian packages and their versions."""


# ------------------------------------------------------------------------------ helpers


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` if set, else :data:`DEFAULT_EPOCH`."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        return DEFAULT_EPOCH
    try:
        return int(raw)
    except ValueError:
        raise ImageError(f"SOURCE_DATE_EPOCH is not a number of seconds: {raw!r}") from None


def _rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def images_root() -> Path:
    """Where the base and the archives are cached: ``cache_root()/images``."""
    return binaries.cache_root() / "images"


def _uv() -> str:
    pinned = binaries.repo_root() / ".tools" / "bin" / "uv"
    if pinned.is_file():
        return str(pinned)
    found = shutil.which("uv")
    if found is None:
        raise ImageError("uv was not found (.tools/bin/uv or on PATH): run `make venv`")
    return found


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageError(f"{what} needs root (mmdebstrap's root mode and chroot); run as root")


def _require_tools(names: Sequence[str], out: Progress) -> None:
    wanted = [p for p in packages.IMAGE_PACKAGES if p.name in names]
    packages.ensure(wanted, out=out, install=False)


def _run(
    cmd: Sequence[str],
    *,
    out: Progress,
    label: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``cmd`` and return its standard output; progress ticks show the elapsed time
    and its last line of standard error. A failure raises :class:`ImageError` with the
    tail of that output."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as err:
        raise ImageError(f"{label}: cannot run {cmd[0]}: {err}") from err
    assert proc.stdout is not None and proc.stderr is not None
    tail: list[str] = []
    chunks: list[str] = []
    stderr, stdout = proc.stderr, proc.stdout

    def pump_err() -> None:
        for line in stderr:
            tail.append(line.rstrip("\n"))
            del tail[:-60]

    def pump_out() -> None:
        chunks.append(stdout.read())

    threads = [threading.Thread(target=f, daemon=True) for f in (pump_err, pump_out)]
    for thread in threads:
        thread.start()
    try:
        while True:
            try:
                code = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                last = next((line for line in reversed(tail) if line.strip()), "")
                out.tick(f"[{label}] {time.monotonic() - started:.0f}s elapsed {last[:100]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for thread in threads:
            thread.join()
        stdout.close()
        stderr.close()
    if code != 0:
        raise ImageError(
            f"{label}: `{' '.join(cmd[:4])} …` failed (exit {code}):\n"
            + "\n".join(tail[-30:] or chunks[-1:])
        )
    return "".join(chunks)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _walk(root: Path, rel: str = "") -> Iterator[str]:
    """Paths under ``root`` (relative, ``/``-separated), parents before children, names
    in byte order; symbolic links are not followed."""
    here = root / rel if rel else root
    for name in sorted(os.listdir(here), key=os.fsencode):
        path = f"{rel}/{name}" if rel else name
        yield path
        if stat.S_ISDIR(os.lstat(root / path).st_mode):
            yield from _walk(root, path)


def write_tar(
    dest: Path,
    root: Path,
    *,
    epoch: int,
    paths: Iterable[str] | None = None,
) -> tuple[str, int]:
    """Write a deterministic tar of ``root`` (or of ``paths`` under it, in their order)
    to ``dest`` and return its sha256 and size.

    Entries: sorted, owner 0:0 without names, mtime ``epoch``, mode 0755 for directories
    and files with any execute bit, 0644 for other files (a world-writable sticky
    directory such as /tmp stays 1777); hard links become separate files; PAX headers
    only for names too long for ustar. Device nodes, sockets and FIFOs are refused.
    """
    names = list(_walk(root)) if paths is None else list(paths)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            path = root / name
            st = os.lstat(path)
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                sticky = st.st_mode & stat.S_ISVTX and st.st_mode & stat.S_IWOTH
                info.mode = 0o1777 if sticky else 0o755
                tar.addfile(info)
            elif stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                info.mode = 0o777
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.type = tarfile.REGTYPE
                info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                info.size = st.st_size
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                raise ImageError(f"{path}: not a file, directory or symbolic link")
    return _sha256_file(dest), dest.stat().st_size


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


def _chroot(root: Path, argv: Sequence[str], *, out: Progress, label: str) -> str:
    """Run ``argv`` in the chroot ``root`` with a fixed environment."""
    chroot = shutil.which("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin")
    if chroot is None:
        raise ImageError("chroot (coreutils) was not found")
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
    return _run([chroot, str(root), *argv], out=out, label=label, env=env)


def _compile(root: Path, directory: str, *, out: Progress, label: str) -> None:
    """Byte-compile ``directory`` (a path inside ``root``) with the image's interpreter:
    one process in sorted order, unchecked-hash pycs, reproducible."""
    _chroot(
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


@contextlib.contextmanager
def _locked(out: Progress) -> Iterator[None]:
    """One image build at a time per cache directory."""
    images_root().mkdir(parents=True, exist_ok=True)
    with (images_root() / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.say(f"waiting for another image build ({images_root() / '.lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------- base


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
    _require_root("building the base layer")
    _require_tools(("mmdebstrap",), out)
    images_root().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    out.say(
        f"base: mmdebstrap --variant=extract {SUITE} ({', '.join(BASE_PACKAGES)}) from "
        "deb.debian.org: once per machine, about 15-60 s"
    )
    with tempfile.TemporaryDirectory(prefix=".tmp-base-", dir=images_root()) as tmp:
        raw = Path(tmp) / "mmdebstrap.tar"
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "TMPDIR": tmp}
        _run(_mmdebstrap_args(raw), out=out, label="base: mmdebstrap", env=env)
        out.say(f"base: mmdebstrap done in {time.monotonic() - started:.0f}s; finishing it")
        root = Path(tmp) / "root"
        root.mkdir()
        _run(
            ["tar", "-x", "-f", str(raw), "-C", str(root), "--numeric-owner", "--exclude=./dev/*"],
            out=out,
            label="base: unpack",
        )
        raw.unlink()
        python_version, pkgs = _finish_base(root, out)
        staging = Path(tmp) / "base.tar"
        diff_id, size = write_tar(staging, root, epoch=epoch)
        directory.mkdir(parents=True, exist_ok=True)
        staging.replace(directory / "base.tar")
        meta.write_text(
            json.dumps(
                {
                    "key": key,
                    "diff_id": f"sha256:{diff_id}",
                    "size": size,
                    "python_version": python_version,
                    "packages": pkgs,
                    "built_seconds": round(time.monotonic() - started, 1),
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
    _prune(images_root(), keep=2, prefix="base-")
    out.say(
        f"base: {len(pkgs)} packages, Python {python_version}, {size / 1e6:.1f} MB, "
        f"built in {time.monotonic() - started:.0f}s ({directory})"
    )
    return ensure_base(out=out, epoch=epoch)


def _finish_base(root: Path, out: Progress) -> tuple[str, dict[str, str]]:
    """What the skipped maintainer scripts and a runtime need, and the removals."""
    for pattern in _BASE_REMOVE:
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
    for name, text in (("passwd", _USERS), ("group", _GROUP), ("nsswitch.conf", _NSSWITCH)):
        (root / "etc" / name).write_text(text)
    for name in ("proc", "sys", "run", "tmp"):
        (root / name).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    _compile(root, f"/usr/lib/python{PYTHON_VERSION}", out=out, label="base: compileall")
    version = _chroot(
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


# ------------------------------------------------------------------------------- venvs


@dataclass(frozen=True)
class _Member:
    """A workspace member: its distribution name, version and directory."""

    name: str
    version: str
    path: Path


def _members(root: Path) -> dict[str, _Member]:
    """Every workspace member by the directory uv export names it with (``./manager``)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    dirs = [".", *config["tool"]["uv"]["workspace"]["members"]]
    found: dict[str, _Member] = {}
    for rel in dirs:
        project = tomllib.loads((root / rel / "pyproject.toml").read_text())["project"]
        key = "." if rel == "." else f"./{rel}"
        found[key] = _Member(project["name"], project["version"], (root / rel).resolve())
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
    return _run(cmd, out=out, label=f"{venv.name}: uv export", cwd=root)


@dataclass(frozen=True)
class _VenvPlan:
    venv: Venv
    requirements: str
    """Third-party requirements with hashes."""
    members: tuple[_Member, ...]
    """Workspace packages it installs."""


def _plan(uv: str, root: Path, out: Progress) -> list[_VenvPlan]:
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
        plans.append(_VenvPlan(venv, requirements, tuple(sorted(mine, key=lambda m: m.name))))
    return plans


def _member_files(member: _Member) -> Iterator[Path]:
    """The files of a member that go into its wheel (or its metadata)."""
    yield member.path / "pyproject.toml"
    project = tomllib.loads((member.path / "pyproject.toml").read_text())["project"]
    readme = project.get("readme")
    if isinstance(readme, str):
        yield member.path / readme
    for pattern in ("LICENSE*", "LICENCE*", "COPYING*", "NOTICE*", "AUTHORS*"):
        yield from sorted(member.path.glob(pattern))
    src = member.path / "src"
    for rel in _walk(src):
        parts = rel.split("/")
        if "__pycache__" in parts or rel.endswith(".pyc"):
            continue
        path = src / rel
        if path.is_file() or path.is_symlink():
            yield path


def _inputs_key(
    *,
    plans: Sequence[_VenvPlan],
    base: Base,
    tag: str,
    epoch: int,
    uv_version: str,
    pause_binary: Path | None,
) -> str:
    digest = hashlib.sha256()

    def feed(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    feed("recipe", Path(__file__).read_bytes())
    feed("settings", json.dumps([RECIPE_VERSION, tag, epoch, uv_version, HATCHLING]).encode())
    feed("base", base.key.encode() + base.diff_id.encode())
    seen: set[Path] = set()
    for plan in plans:
        feed(f"venv {plan.venv.name}", plan.requirements.encode())
        for member in plan.members:
            feed("member", member.name.encode())
            if member.path in seen:
                continue
            seen.add(member.path)
            for path in _member_files(member):
                rel = str(path.relative_to(member.path))
                if path.is_symlink():
                    feed(f"{member.name}:{rel}->", os.readlink(path).encode())
                else:
                    feed(f"{member.name}:{rel}", path.read_bytes())
    if pause_binary is not None:
        feed("pause", pause_binary.read_bytes())
    return digest.hexdigest()


def _build_wheels(
    uv: str, root: Path, members: Iterable[_Member], dest: Path, out: Progress
) -> None:
    constraints = dest.parent / "build-constraints.txt"
    constraints.write_text(HATCHLING + "\n")
    for member in sorted(set(members), key=lambda m: m.name):
        _run(
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


def _install_venv(
    uv: str,
    repo: Path,
    scratch: Path,
    plan: _VenvPlan,
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
    _run(
        [uv, "pip", "install", *target, "--require-hashes", "-r", str(requirements), "--quiet"],
        out=out,
        label=label,
        cwd=repo,
    )
    pinned = [f"{m.name}=={m.version}" for m in plan.members]
    # Installed by name from the wheels (not from paths: no direct_url.json naming this
    # checkout), without uv's cache (every workspace version is the same 0.1.0).
    _run(
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
    _compile(scratch, SITE_PACKAGES, out=out, label=f"{plan.venv.name}: compileall")


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


# -------------------------------------------------------------------------------- umoci


@dataclass
class _Layout:
    """An OCI image layout that umoci writes, every timestamp given (so reproducible)."""

    path: Path
    created: str
    out: Progress

    def umoci(self, *args: str, label: str) -> None:
        _run(["umoci", *args], out=self.out, label=f"umoci {label}")

    def init(self) -> None:
        self.umoci("init", "--layout", str(self.path), label="init")

    def new(self, tag: str) -> None:
        self.umoci("new", "--image", f"{self.path}:{tag}", label=f"new {tag}")

    def add_layer(self, tag: str, layer: Path, what: str, *, new_tag: str | None = None) -> None:
        """Append ``layer`` (an uncompressed tar; umoci gzips it) to ``tag``'s image, or
        to a copy of it tagged ``new_tag``."""
        args = ["raw", "add-layer", "--image", f"{self.path}:{tag}"]
        if new_tag:
            args += ["--tag", new_tag]
        args += ["--history.created", self.created, "--history.created_by", what]
        self.umoci(*args, str(layer), label=f"add-layer {new_tag or tag}")

    def configure(
        self,
        tag: str,
        *,
        user: str | None,
        entrypoint: Sequence[str],
        env: Iterable[tuple[str, str]],
        workingdir: str | None = WORKDIR,
        cmd: Sequence[str] = (),
        exposed_ports: Sequence[str] = (),
    ) -> None:
        """Set ``tag``'s configuration; ``None`` (and empty sequences) leave a field out."""
        args = ["config", "--image", f"{self.path}:{tag}", "--created", self.created]
        args.append("--no-history")
        if user is not None:
            args.append(f"--config.user={user}")
        if workingdir is not None:
            args.append(f"--config.workingdir={workingdir}")
        args += [f"--config.env={k}={v}" for k, v in env]
        args += [f"--config.entrypoint={part}" for part in entrypoint]
        args += [f"--config.cmd={part}" for part in cmd]
        args += [f"--config.exposedports={port}" for port in exposed_ports]
        self.umoci(*args, label=f"config {tag}")

    def tag(self, tag: str, new_tag: str) -> None:
        """Name ``tag``'s manifest ``new_tag`` too (one manifest, two index entries)."""
        self.umoci("tag", "--image", f"{self.path}:{tag}", new_tag, label=f"tag {new_tag}")

    def remove(self, tag: str) -> None:
        self.umoci("rm", "--image", f"{self.path}:{tag}", label=f"rm {tag}")

    def gc(self) -> None:
        self.umoci("gc", "--layout", str(self.path), label="gc")


def _finish_index(layout: Path, names: dict[str, str]) -> None:
    """Name each manifest for containerd (``io.containerd.image.name``) and by its tag
    (``org.opencontainers.image.ref.name``), replacing umoci's internal tags."""
    index = json.loads((layout / "index.json").read_text())
    manifests = []
    for desc in index["manifests"]:
        internal = desc.get("annotations", {}).get("org.opencontainers.image.ref.name")
        if internal not in names:
            raise ImageError(f"unexpected manifest in the layout: {internal!r}")
        name = names[internal]
        desc["annotations"] = {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
        }
        desc["platform"] = {"architecture": "amd64", "os": "linux"}
        manifests.append(desc)
    manifests.sort(key=lambda d: d["annotations"]["io.containerd.image.name"])
    index["manifests"] = manifests
    (layout / "index.json").write_text(json.dumps(index, sort_keys=True, indent=None))


def _blob(layout: Path, digest: str) -> Path:
    algorithm, hexdigest = digest.split(":", 1)
    return layout / "blobs" / algorithm / hexdigest


def _describe(
    layout: Path, unpacked: dict[str, tuple[int, str]]
) -> tuple[dict[str, ImageInfo], dict[str, Layer]]:
    """Images and layers of a finished layout; ``unpacked``: diff_id → (size, what)."""
    index = json.loads((layout / "index.json").read_text())
    images: dict[str, ImageInfo] = {}
    layers: dict[str, Layer] = {}
    for desc in index["manifests"]:
        name = desc["annotations"]["io.containerd.image.name"]
        manifest = json.loads(_blob(layout, desc["digest"]).read_text())
        config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
        diff_ids = config["rootfs"]["diff_ids"]
        total = desc["size"] + manifest["config"]["size"]
        unpacked_total = 0
        for layer, diff_id in zip(manifest["layers"], diff_ids, strict=True):
            size, what = unpacked[diff_id]
            layers[layer["digest"]] = Layer(layer["digest"], layer["size"], diff_id, size, what)
            total += layer["size"]
            unpacked_total += size
        images[name] = ImageInfo(
            name,
            desc["digest"],
            total,
            unpacked_total,
            tuple(layer["digest"] for layer in manifest["layers"]),
        )
    return images, layers


# -------------------------------------------------------------------------------- build


def build_images(
    tag: str = DEFAULT_TAG,
    *,
    out: Progress,
    pause_binary: Path | None = None,
    output: Path | None = None,
    use_cache: bool = True,
    rebuild_base: bool = False,
) -> BuiltImages:
    """Build Steward's images (and the pause image with ``pause_binary``) into one OCI
    image-layout archive; see the module's documentation.

    The archive is kept in ``cache_root()/images/archives/<key>/`` (the last three
    builds), and also written to ``output`` when given. A cached archive of the same
    inputs is returned at once unless ``use_cache`` is false; the base layer is reused
    unless ``rebuild_base``.
    """
    started = time.monotonic()
    if not tag or any(c in tag for c in "/:@ ") or len(tag) > 128:
        raise ImageError(f"not an image tag: {tag!r}")
    epoch = source_date_epoch()
    repo = binaries.repo_root()
    uv = _uv()
    with _locked(out):
        base = ensure_base(out=out, epoch=epoch, rebuild=rebuild_base)
        uv_version = _run([uv, "--version"], out=out, label="uv").strip()
        plans = _plan(uv, repo, out)
        key = _inputs_key(
            plans=plans,
            base=base,
            tag=tag,
            epoch=epoch,
            uv_version=uv_version,
            pause_binary=pause_binary,
        )
        directory = images_root() / "archives" / key[:20]
        archive = directory / f"steward-images-{tag}.tar"
        meta = directory / "built.json"
        if use_cache and meta.is_file() and archive.is_file():
            built = _load(meta, archive, seconds=time.monotonic() - started)
            out.say(f"images: unchanged inputs, cached archive {archive}")
        else:
            _require_root("building the images")
            _require_tools(("umoci",), out)
            out.say(
                f"images: building {len(IMAGES)} service images"
                + (" and the pause image" if pause_binary else "")
                + f" (tag {tag}) on base {base.key[:12]}"
            )
            built = _build(
                repo=repo,
                uv=uv,
                plans=plans,
                base=base,
                tag=tag,
                epoch=epoch,
                key=key,
                directory=directory,
                archive=archive,
                pause_binary=pause_binary,
                out=out,
                started=started,
            )
            _prune(directory.parent, keep=3)
    if output is not None:
        output = output.resolve()
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = output.with_name(output.name + ".partial")
        shutil.copyfile(built.archive, staging)
        staging.replace(output)
        built = dataclasses.replace(built, archive=output)
    return built


def _build(
    *,
    repo: Path,
    uv: str,
    plans: Sequence[_VenvPlan],
    base: Base,
    tag: str,
    epoch: int,
    key: str,
    directory: Path,
    archive: Path,
    pause_binary: Path | None,
    out: Progress,
    started: float,
) -> BuiltImages:
    created = _rfc3339(epoch)
    unpacked: dict[str, tuple[int, str]] = {
        base.diff_id: (base.size, f"base: Debian {SUITE}, Python {base.python_version}")
    }
    with tempfile.TemporaryDirectory(prefix=".tmp-build-", dir=images_root()) as tmp_name:
        tmp = Path(tmp_name)
        wheels = tmp / "wheels"
        _build_wheels(uv, repo, (m for p in plans for m in p.members), wheels, out)
        out.say(f"images: workspace wheels built ({time.monotonic() - started:.0f}s)")
        scratch = tmp / "root"
        scratch.mkdir()
        _run(["tar", "-x", "-f", str(base.layer), "-C", str(scratch)], out=out, label="unpack base")
        venv_layers: dict[str, tuple[Path, str]] = {}
        for plan in plans:
            began = time.monotonic()
            _install_venv(uv, repo, scratch, plan, wheels, base.python_version, out)
            layer = tmp / f"venv-{plan.venv.name}.tar"
            opt = ["opt", *(f"opt/{p}" for p in _walk(scratch / "opt"))]
            diff_id, size = write_tar(layer, scratch, epoch=epoch, paths=opt)
            shutil.rmtree(scratch / "opt")
            what = f"venv {plan.venv.name}: " + ", ".join(m.name for m in plan.members)
            unpacked[f"sha256:{diff_id}"] = (size, what)
            venv_layers[plan.venv.name] = (layer, what)
            out.say(
                f"images: venv {plan.venv.name} {size / 1e6:.0f} MB "
                f"({time.monotonic() - began:.0f}s)"
            )
        layout = _Layout(tmp / "layout", created, out)
        layout.init()
        layout.new("base")
        layout.add_layer("base", base.layer, unpacked[base.diff_id][1])
        names: dict[str, str] = {}
        for image in IMAGES:
            layer, what = venv_layers[image.venv]
            layout.add_layer("base", layer, what, new_tag=image.service)
            layout.configure(image.service, user=USER, entrypoint=image.entrypoint(), env=ENV)
            names[image.service] = image.ref(tag)
        layout.remove("base")
        if pause_binary is not None:
            _add_pause(layout, pause_binary, tmp, epoch, unpacked)
            names["pause"] = PAUSE_IMAGE
        layout.gc()
        _finish_index(layout.path, names)
        images, layers = _describe(layout.path, unpacked)
        staging = tmp / archive.name
        write_tar(staging, layout.path, epoch=epoch)
        directory.mkdir(parents=True, exist_ok=True)
        staging.replace(archive)
    seconds = time.monotonic() - started
    built = BuiltImages(
        archive=archive,
        images=images,
        layers=layers,
        seconds=seconds,
        cached=False,
        key=key,
        base_key=base.key,
        base_packages=base.packages,
    )
    _save(built, directory / "built.json")
    out.say(f"images: {len(images)} images in {archive} ({seconds:.0f}s)")
    return built


def _add_pause(
    layout: _Layout,
    pause_binary: Path,
    tmp: Path,
    epoch: int,
    unpacked: dict[str, tuple[int, str]],
) -> None:
    """The pause image, tagged ``pause`` in ``layout``: ``/pause`` alone, user 65535."""
    pause_root = tmp / "pause-root"
    pause_root.mkdir()
    shutil.copyfile(pause_binary, pause_root / "pause")
    (pause_root / "pause").chmod(0o755)
    pause_layer = tmp / "pause-layer.tar"
    diff_id, size = write_tar(pause_layer, pause_root, epoch=epoch)
    unpacked[f"sha256:{diff_id}"] = (size, "pause: /pause")
    layout.new("pause")
    layout.add_layer("pause", pause_layer, "pause: /pause")
    layout.configure("pause", user=PAUSE_USER, entrypoint=["/pause"], env=())


def build_pause_archive(pause_binary: Path, *, out: Progress, output: Path | None = None) -> Path:
    """An archive holding the pause image (:data:`PAUSE_IMAGE`) alone, for nodes that need
    their sandbox image without Steward's: cached by the binary's digest; needs umoci,
    but neither root nor mmdebstrap. Written to ``output`` too when given."""
    epoch = source_date_epoch()
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(f"\0{epoch}\0".encode())
    digest.update(pause_binary.read_bytes())
    key = digest.hexdigest()
    archive = images_root() / "pause" / key[:20] / "pause.tar"
    with _locked(out):
        if not archive.is_file():
            _require_tools(("umoci",), out)
            with tempfile.TemporaryDirectory(prefix=".tmp-pause-", dir=images_root()) as tmp_name:
                tmp = Path(tmp_name)
                layout = _Layout(tmp / "layout", _rfc3339(epoch), out)
                layout.init()
                _add_pause(layout, pause_binary, tmp, epoch, {})
                layout.gc()
                _finish_index(layout.path, {"pause": PAUSE_IMAGE})
                staging = tmp / "pause.tar"
                write_tar(staging, layout.path, epoch=epoch)
                archive.parent.mkdir(parents=True, exist_ok=True)
                staging.replace(archive)
            _prune(archive.parent.parent, keep=3)
            out.say(f"images: {PAUSE_IMAGE} in {archive}")
    if output is None:
        return archive
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(output.name + ".partial")
    shutil.copyfile(archive, staging)
    staging.replace(output)
    return output


# --------------------------------------------------------------------------- e2e images

E2E_RECIPE_VERSION = "2"
"""Bumped when what :func:`build_e2e` makes changes in a way its inputs do not show (the
images' trees, configurations or names)."""

BUSYBOX_IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
AGNHOST_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
AGNHOST_PREVIOUS_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.55"
"""The Deployment specs roll from this agnhost to :data:`AGNHOST_IMAGE`: the same image."""
E2E_IMAGES: tuple[str, ...] = (AGNHOST_PREVIOUS_IMAGE, AGNHOST_IMAGE, BUSYBOX_IMAGE, PAUSE_IMAGE)
"""The names :func:`build_e2e_archive`'s archive holds, in its index's (sorted) order."""

BUSYBOX_BINARY = Path("/bin/busybox")
"""Debian's busybox-static (a static binary; the dynamic ``busybox`` package's is not)."""
BUSYBOX_COPYRIGHT = Path("/usr/share/doc/busybox-static/copyright")
E2E_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Upstream's PATH (busybox's and Alpine's images)."""
AGNHOST_ENTRYPOINT = ("/agnhost",)
AGNHOST_CMD = ("pause",)
AGNHOST_PORTS = ("80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp")
"""What upstream's agnhost Dockerfile exposes (test-webserver, netexec and nettest,
netexec's UDP, serve-hostname, grpc-health-checking)."""

_E2E_USERS = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
_E2E_GROUP = "root:x:0:\nnobody:x:65534:\n"
_AGNHOST_USERS = (
    _E2E_USERS + "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
)
_AGNHOST_GROUP = (
    _E2E_GROUP
    + "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
)
_E2E_TAGS = {
    "agnhost": AGNHOST_IMAGE,
    "agnhost-previous": AGNHOST_PREVIOUS_IMAGE,
    "busybox": BUSYBOX_IMAGE,
    "pause": PAUSE_IMAGE,
}
"""umoci's internal tag of each image in the layout → its name."""


@dataclass(frozen=True)
class BuiltE2E:
    """What :func:`build_e2e` made."""

    archive: Path
    """The OCI image-layout tar holding :data:`E2E_IMAGES`."""
    images: dict[str, ImageInfo]
    """By name; both agnhost names have the same manifest."""
    layers: dict[str, Layer]
    """Every layer blob, by digest (busybox's is shared by busybox and agnhost)."""
    seconds: float
    cached: bool
    key: str
    """Digest of the inputs."""
    busybox_version: str
    """What the busybox binary says it is, e.g. ``v1.35.0 (Debian 1:1.35.0-4+deb12u1+b1)``."""
    applets: int
    """How many applets are linked in ``/bin``."""


def _static_elf(path: Path, what: str) -> None:
    """Raise unless ``path`` is an x86-64 ELF executable without an interpreter (so it
    needs no libc in the image)."""
    try:
        with path.open("rb") as f:
            header = f.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4:6] != b"\x02\x01":
                raise ImageError(f"{what} {path}: not a 64-bit little-endian ELF executable")
            (machine,) = struct.unpack_from("<H", header, 18)
            if machine != 62:
                raise ImageError(f"{what} {path}: not an x86-64 executable (machine {machine})")
            (phoff,) = struct.unpack_from("<Q", header, 32)
            phentsize, phnum = struct.unpack_from("<HH", header, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError as err:
        raise ImageError(f"{what} {path}: {err}") from err
    for i in range(phnum):
        (p_type,) = struct.unpack_from("<I", table, i * phentsize)
        if p_type == 3:  # PT_INTERP
            raise ImageError(
                f"{what} {path} is dynamically linked (it names an interpreter) and the "
                "image has no libc: use a static build (CGO_ENABLED=0, busybox-static)"
            )


def _e2e_key(*, agnhost: Path, pause: Path, busybox: Path, epoch: int) -> str:
    digest = hashlib.sha256()

    def feed(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    recipe = {
        "version": E2E_RECIPE_VERSION,
        "images": _E2E_TAGS,
        "path": E2E_PATH,
        "agnhost": [AGNHOST_ENTRYPOINT, AGNHOST_CMD, AGNHOST_PORTS],
        "files": [_E2E_USERS, _E2E_GROUP, _AGNHOST_USERS, _AGNHOST_GROUP],
        "pause": PAUSE_USER,
        "epoch": epoch,
    }
    feed("recipe", json.dumps(recipe, sort_keys=True).encode())
    for label, path in (("agnhost", agnhost), ("pause", pause), ("busybox", busybox)):
        feed(label, _sha256_file(path).encode())
    copyright_ = BUSYBOX_COPYRIGHT.read_bytes() if BUSYBOX_COPYRIGHT.is_file() else b""
    feed("busybox copyright", copyright_)
    return digest.hexdigest()


def _busybox_applets(busybox: Path, out: Progress) -> tuple[str, list[str]]:
    """``busybox``'s version line and its applets (from ``busybox --list``)."""
    banner = _run([str(busybox)], out=out, label="busybox").splitlines()
    match = re.match(r"BusyBox (v\S+(?: \([^)]*\))?)", banner[0] if banner else "")
    version = match.group(1) if match else "unknown"
    listed = _run([str(busybox), "--list"], out=out, label="busybox --list").split()
    applets = sorted(set(listed) - {"busybox"}, key=os.fsencode)
    bad = [a for a in applets if "/" in a or a in (".", "..")]
    if bad or "sh" not in applets:
        raise ImageError(f"{busybox} --list: unexpected applets {bad} (or no sh): {listed[:20]}")
    return version, applets


def _busybox_tree(root: Path, busybox: Path, applets: Sequence[str]) -> None:
    """busybox's root file system: /bin/busybox, every applet a symbolic link to it in
    /bin, /etc/passwd and /etc/group (root, nobody), /tmp 1777, busybox's copyright."""
    for name in ("bin", "dev", "etc", "home", "proc", "root", "sys", "tmp", "usr", "var"):
        (root / name).mkdir(parents=True)
    (root / "tmp").chmod(0o1777)
    shutil.copyfile(busybox, root / "bin" / "busybox")
    (root / "bin" / "busybox").chmod(0o755)
    for applet in applets:
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "passwd").write_text(_E2E_USERS)
    (root / "etc" / "group").write_text(_E2E_GROUP)
    if BUSYBOX_COPYRIGHT.is_file():
        doc = root / "usr/share/doc/busybox-static"
        doc.mkdir(parents=True)
        shutil.copyfile(BUSYBOX_COPYRIGHT, doc / "copyright")


def _agnhost_tree(root: Path, agnhost: Path) -> None:
    """agnhost's layer over busybox's, as upstream's Dockerfile adds: /agnhost, the
    /agnhost-2 link (entrypoint-tester), /uploads (netexec) and the users
    user-defined-in-image (1000) in group-defined-in-image (50000); and /var/tmp 1777,
    which upstream's Alpine base has (the DaemonSet surge spec's readiness probe touches
    a file there)."""
    root.mkdir()
    shutil.copyfile(agnhost, root / "agnhost")
    (root / "agnhost").chmod(0o755)
    (root / "agnhost-2").symlink_to("agnhost")
    (root / "uploads").mkdir()
    (root / "var" / "tmp").mkdir(parents=True)
    (root / "var" / "tmp").chmod(0o1777)
    (root / "home" / "user-defined-in-image").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text(_AGNHOST_USERS)
    (root / "etc" / "group").write_text(_AGNHOST_GROUP)


def build_e2e(
    *,
    agnhost_binary: Path,
    pause_binary: Path,
    out: Progress,
    output: Path | None = None,
    use_cache: bool = True,
    busybox_binary: Path = BUSYBOX_BINARY,
) -> BuiltE2E:
    """Build :data:`E2E_IMAGES` into one OCI image-layout archive (see the module's
    documentation); :func:`build_e2e_archive` returns its path alone.

    Kept in ``cache_root()/images/e2e/<key>/`` (the last three) and returned at once
    when the inputs are unchanged (unless ``use_cache`` is false); written to ``output``
    too when given. Needs umoci and, for the default busybox, busybox-static; no root.
    """
    started = time.monotonic()
    epoch = source_date_epoch()
    if busybox_binary == BUSYBOX_BINARY:
        _require_tools(("busybox-static",), out)
    for what, path in (
        ("agnhost", agnhost_binary),
        ("pause", pause_binary),
        ("busybox", busybox_binary),
    ):
        _static_elf(path, what)
    key = _e2e_key(agnhost=agnhost_binary, pause=pause_binary, busybox=busybox_binary, epoch=epoch)
    directory = images_root() / "e2e" / key[:20]
    archive = directory / "e2e-images.tar"
    meta = directory / "built.json"
    # The archive is in place before its built.json: a cached result needs no lock (so
    # no wait for another build of Steward's images).
    cached = use_cache and meta.is_file() and archive.is_file()
    with contextlib.nullcontext() if cached else _locked(out):
        if use_cache and meta.is_file() and archive.is_file():
            built = _load_e2e(meta, archive, seconds=time.monotonic() - started)
            out.say(f"e2e images: unchanged inputs, cached archive {archive}")
        else:
            _require_tools(("umoci",), out)
            out.say(f"e2e images: building {', '.join(E2E_IMAGES)}")
            built = _build_e2e(
                agnhost=agnhost_binary,
                pause=pause_binary,
                busybox=busybox_binary,
                epoch=epoch,
                key=key,
                archive=archive,
                started=started,
                out=out,
            )
            _prune(directory.parent, keep=3)
    if output is not None:
        output = output.resolve()
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = output.with_name(output.name + ".partial")
        shutil.copyfile(built.archive, staging)
        staging.replace(output)
        built = dataclasses.replace(built, archive=output)
    return built


def build_e2e_archive(
    *, agnhost_binary: Path, pause_binary: Path, out: Progress, output: Path | None = None
) -> Path:
    """The archive of :data:`E2E_IMAGES` for ``ctr -n k8s.io images import``
    (:func:`import_into_containerd`): built from ``agnhost_binary`` (a static build of
    the pinned module's ``test/images/agnhost``), ``pause_binary`` and Debian's
    busybox-static, cached by their digests. ``output``: also written there."""
    return build_e2e(
        agnhost_binary=agnhost_binary, pause_binary=pause_binary, out=out, output=output
    ).archive


def _build_e2e(
    *,
    agnhost: Path,
    pause: Path,
    busybox: Path,
    epoch: int,
    key: str,
    archive: Path,
    started: float,
    out: Progress,
) -> BuiltE2E:
    unpacked: dict[str, tuple[int, str]] = {}
    env = (("PATH", E2E_PATH),)
    with tempfile.TemporaryDirectory(prefix=".tmp-e2e-", dir=images_root()) as tmp_name:
        tmp = Path(tmp_name)
        version, applets = _busybox_applets(busybox, out)
        _busybox_tree(tmp / "busybox-root", busybox, applets)
        busybox_layer = tmp / "busybox-layer.tar"
        diff_id, size = write_tar(busybox_layer, tmp / "busybox-root", epoch=epoch)
        busybox_what = f"busybox: Debian busybox-static {version}, {len(applets)} applets in /bin"
        unpacked[f"sha256:{diff_id}"] = (size, busybox_what)
        _agnhost_tree(tmp / "agnhost-root", agnhost)
        agnhost_layer = tmp / "agnhost-layer.tar"
        diff_id, size = write_tar(agnhost_layer, tmp / "agnhost-root", epoch=epoch)
        agnhost_what = "agnhost: /agnhost (k8s.io/kubernetes test/images/agnhost)"
        unpacked[f"sha256:{diff_id}"] = (size, agnhost_what)

        layout = _Layout(tmp / "layout", _rfc3339(epoch), out)
        layout.init()
        layout.new("busybox")
        layout.add_layer("busybox", busybox_layer, busybox_what)
        layout.add_layer("busybox", agnhost_layer, agnhost_what, new_tag="agnhost")
        # Upstream's busybox runs as root with no working directory set, CMD ["sh"].
        layout.configure("busybox", user=None, entrypoint=(), env=env, workingdir=None, cmd=("sh",))
        layout.configure(
            "agnhost",
            user=None,
            entrypoint=AGNHOST_ENTRYPOINT,
            env=env,
            workingdir=None,
            cmd=AGNHOST_CMD,
            exposed_ports=AGNHOST_PORTS,
        )
        layout.tag("agnhost", "agnhost-previous")
        _add_pause(layout, pause, tmp, epoch, unpacked)
        layout.gc()
        _finish_index(layout.path, _E2E_TAGS)
        images, layers = _describe(layout.path, unpacked)
        staging = tmp / archive.name
        write_tar(staging, layout.path, epoch=epoch)
        archive.parent.mkdir(parents=True, exist_ok=True)
        staging.replace(archive)
    seconds = time.monotonic() - started
    built = BuiltE2E(
        archive=archive,
        images=images,
        layers=layers,
        seconds=seconds,
        cached=False,
        key=key,
        busybox_version=version,
        applets=len(applets),
    )
    data = asdict(built)
    data["archive"] = str(archive)
    meta = archive.parent / "built.json"
    meta.with_name(meta.name + ".partial").write_text(json.dumps(data, indent=2, sort_keys=True))
    meta.with_name(meta.name + ".partial").replace(meta)
    out.say(f"e2e images: {len(images)} images in {archive} ({seconds:.0f}s)")
    return built


def _load_e2e(path: Path, archive: Path, *, seconds: float) -> BuiltE2E:
    data = json.loads(path.read_text())
    return BuiltE2E(
        archive=archive,
        images={
            name: ImageInfo(**{**info, "layers": tuple(info["layers"])})
            for name, info in data["images"].items()
        },
        layers={digest: Layer(**layer) for digest, layer in data["layers"].items()},
        seconds=seconds,
        cached=True,
        key=data["key"],
        busybox_version=data["busybox_version"],
        applets=data["applets"],
    )


def _save(built: BuiltImages, path: Path) -> None:
    data = asdict(built)
    data["archive"] = str(built.archive)
    staging = path.with_name(path.name + ".partial")
    staging.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    staging.replace(path)


def _load(path: Path, archive: Path, *, seconds: float) -> BuiltImages:
    data = json.loads(path.read_text())
    return BuiltImages(
        archive=archive,
        images={
            name: ImageInfo(**{**info, "layers": tuple(info["layers"])})
            for name, info in data["images"].items()
        },
        layers={digest: Layer(**layer) for digest, layer in data["layers"].items()},
        seconds=seconds,
        cached=True,
        key=data["key"],
        base_key=data["base_key"],
        base_packages=data["base_packages"],
    )


def _prune(directory: Path, *, keep: int, prefix: str = "") -> None:
    """Keep the newest ``keep`` cache entries (subdirectories named ``prefix…``)."""
    entries = [p for p in directory.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------------------ import


def archive_names(archive: Path) -> list[str]:
    """The image names (``io.containerd.image.name``) an archive's index holds."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ImageError(f"{archive}: no index.json")
        index = json.load(io.TextIOWrapper(member, encoding="utf-8"))
    return [d["annotations"]["io.containerd.image.name"] for d in index["manifests"]]


def import_into_containerd(
    archive: Path,
    *,
    address: str,
    namespace: str = "k8s.io",
    ctr: str = "ctr",
    unpack: bool = True,
    snapshotter: str | None = None,
) -> list[str]:
    """Import ``archive`` into the containerd at ``address`` (its socket) with
    ``ctr images import`` and return the names imported (checked with ``ctr images ls``).

    The images are single-platform (linux/amd64) manifests with their platform in the
    index, so neither ``--all-platforms`` nor ``--base-name`` is needed; ``unpack``
    false passes ``--no-unpack`` (the CRI plugin unpacks on first use)."""
    base = [ctr, "--address", address, "--namespace", namespace]
    cmd = [*base, "images", "import"]
    if not unpack:
        cmd.append("--no-unpack")
    if snapshotter:
        cmd += ["--snapshotter", snapshotter]
    done = subprocess.run([*cmd, str(archive)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageError(
            f"`{' '.join(cmd)} {archive}` failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}"
        )
    listed = subprocess.run(
        [*base, "images", "ls", "-q"], capture_output=True, text=True, check=False
    )
    present = set(listed.stdout.split())
    names = archive_names(archive)
    absent = [n for n in names if n not in present]
    if listed.returncode != 0 or absent:
        raise ImageError(
            f"after importing {archive}, containerd at {address} lacks {', '.join(absent)}"
            f" {listed.stderr.strip()}"
        )
    return names


# --------------------------------------------------------------------------------- CLI


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def report(built: BuiltImages | BuiltE2E) -> str:
    """The table ``python -m steward.images`` prints (also with ``--e2e``)."""
    width = max(len(n) for n in built.images)
    lines = [f"{'IMAGE':{width}}  {'MANIFEST DIGEST':71}  {'SIZE':>9}  {'UNPACKED':>9}"]
    for name, info in sorted(built.images.items()):
        lines.append(
            f"{name:{width}}  {info.digest:71}  {_mb(info.size):>9}  {_mb(info.unpacked_size):>9}"
        )
    lines.append("")
    lines.append(f"{'LAYER':{width}}  {'DIGEST':71}  {'SIZE':>9}  {'UNPACKED':>9}")
    users = {d: sum(d in i.layers for i in built.images.values()) for d in built.layers}
    for digest, layer in sorted(built.layers.items(), key=lambda kv: kv[1].description):
        what = f"{layer.description.split(':')[0]} (x{users[digest]})"
        lines.append(
            f"{what:{width}}  {digest:71}  {_mb(layer.size):>9}  {_mb(layer.unpacked_size):>9}"
        )
    size = built.archive.stat().st_size if built.archive.exists() else 0
    lines.append("")
    lines.append(f"archive: {built.archive} ({_mb(size)})")
    lines.append(f"{'cached' if built.cached else 'built'} in {built.seconds:.1f}s; import with:")
    lines.append(f"  ctr -n k8s.io images import {built.archive}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steward.images",
        description=(
            "Build Steward's container images without a daemon: one OCI image-layout "
            "archive for `ctr -n k8s.io images import`, images "
            "steward-{informer,manager,controller-job,controller-replicaset,"
            "controller-deployment,controller-endpoint,controller-endpointslice,"
            "controller-daemonset,controller-horizontalpodautoscaling}:TAG "
            "(and registry.k8s.io/pause:3.10.2 with --pause). "
            "Needs root, mmdebstrap and umoci. With --e2e, the images upstream's "
            "[sig-apps] Job, Deployment and ReplicaSet conformance specs run instead "
            f"({', '.join(E2E_IMAGES)}; needs umoci and busybox-static, not root). "
            "Prints the images, their digests and sizes and the archive's path."
        ),
        epilog=(
            "environment: SOURCE_DATE_EPOCH (file times and `created`, default 0), "
            "STEWARD_CACHE_DIR (cache, default ~/.cache/steward; the archive is kept "
            "in its images/archives/)"
        ),
    )
    parser.add_argument("--tag", default=DEFAULT_TAG, help="image tag (default: %(default)s)")
    parser.add_argument(
        "--output", type=Path, default=None, help="also write the archive to this path"
    )
    pause = parser.add_mutually_exclusive_group()
    pause.add_argument(
        "--pause",
        action="store_true",
        help=f"also build {PAUSE_IMAGE} from Steward's pause program (steward build's)",
    )
    pause.add_argument(
        "--pause-binary", type=Path, default=None, help=f"build {PAUSE_IMAGE} from this binary"
    )
    parser.add_argument(
        "--e2e",
        action="store_true",
        help=(
            "build the e2e test images (busybox, agnhost under two tags, pause) instead of "
            "Steward's; --tag and --rebuild-base do not apply"
        ),
    )
    parser.add_argument(
        "--agnhost-binary",
        type=Path,
        default=None,
        help="with --e2e: a static agnhost binary (default: steward build's agnhost)",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="rebuild the images even if the inputs are unchanged (the base stays cached)",
    )
    parser.add_argument(
        "--rebuild-base", action="store_true", help="rebuild the base layer with mmdebstrap"
    )
    parser.add_argument(
        "--import",
        dest="import_address",
        metavar="SOCKET",
        default=None,
        help="then import the archive into the containerd at this socket (namespace k8s.io)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def _e2e_binaries(args: argparse.Namespace, progress: Progress) -> tuple[Path, Path]:
    """The agnhost and pause binaries of ``--e2e``: given, or steward build's."""
    agnhost = args.agnhost_binary
    if agnhost is None:
        if "agnhost" not in binaries.TOOLS:
            raise ImageError("no agnhost binary: pass --agnhost-binary PATH")
        agnhost = binaries.resolve(["agnhost"], out=progress)["agnhost"]
    pause = args.pause_binary
    if pause is None:
        pause = binaries.resolve(["pause"], out=progress)["pause"]
    return agnhost, pause


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.agnhost_binary is not None and not args.e2e:
        parser.error("--agnhost-binary goes with --e2e")
    if args.e2e and (args.rebuild_base or args.tag != DEFAULT_TAG):
        parser.error("--tag and --rebuild-base do not apply to --e2e")
    progress = Progress(quiet=args.quiet)
    try:
        built: BuiltImages | BuiltE2E
        if args.e2e:
            agnhost, pause = _e2e_binaries(args, progress)
            built = build_e2e(
                agnhost_binary=agnhost,
                pause_binary=pause,
                out=progress,
                output=args.output,
                use_cache=not args.no_cache,
            )
        else:
            pause_binary = args.pause_binary
            if args.pause:
                pause_binary = binaries.resolve(["pause"], out=progress)["pause"]
            built = build_images(
                args.tag,
                out=progress,
                pause_binary=pause_binary,
                output=args.output,
                use_cache=not args.no_cache,
                rebuild_base=args.rebuild_base,
            )
        if args.import_address:
            imported = import_into_containerd(built.archive, address=args.import_address)
            progress.say(f"imported into {args.import_address}: {', '.join(imported)}")
    except ClusterError as err:
        print(f"steward.images: error: {err}", file=sys.stderr)
        return 1
    if args.json:
        data = asdict(built)
        data["archive"] = str(built.archive)
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(report(built))
    return 0


if __name__ == "__main__":
    sys.exit(main())
