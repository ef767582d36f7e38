"""Steward's images built without a daemon (steward.images), checked for real.

The session builds the images once (cached across runs by their inputs: a warm cache
makes this instant), then reads the archive as an OCI image layout (every blob against
its digest and size), checks the configuration, every layer entry and the venvs' split
(one shared layer, each venv's own layer holding its distributions alone), runs each
image's entry point with ``--help`` in a chroot as 65532:65532 and the informer's in runc
(read-only root file system, tmpfs on /tmp), and imports the archive into a containerd of
the test's own. Needs root, mmdebstrap, umoci, runc and containerd (``make node-packages``) and Go
for the pause program: without them the tests skip, except in CI, where they fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steward import images
from steward.cluster import binaries
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress
from steward.images.common import images_root
from steward.images.venvs import Member, conflicts, find_uv, split_layers
from tests.conftest import skip_or_fail

TAG = "dev"
SERVICE_NAMES = {spec.ref(TAG) for spec in images.IMAGES}
ALL_NAMES = SERVICE_NAMES | {images.PAUSE_IMAGE}
EXPECTED_ENV = [f"{k}={v}" for k, v in images.ENV]
TOOLS = ("mmdebstrap", "umoci", "runc", "containerd", "ctr", "chroot")


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "building and running the images needs root"
    absent = [name for name in TOOLS if _which(name) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (make node-packages)"
    return None


# ------------------------------------------------------------------- a build, observed

_spawned: list[list[str]] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen" and _spawned is not None:
        argv = args[1]
        words = argv if isinstance(argv, list | tuple) else [argv]
        _spawned.append([os.fsdecode(a) for a in words])


sys.addaudithook(_audit)  # audit hooks cannot be removed: it records inside spawned() only


@contextlib.contextmanager
def spawned() -> Iterator[list[list[str]]]:
    """The command lines of the subprocesses this process starts inside the block."""
    global _spawned
    found: list[list[str]] = []
    _spawned = found
    try:
        yield found
    finally:
        _spawned = None


@contextlib.contextmanager
def images_lock_held() -> Iterator[None]:
    """Hold the images' build lock (:func:`steward.images.common.locked`'s) in the block,
    as a build of another process would."""
    lock_path = images_root() / ".lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class NoWaiting(Progress):
    """Progress that fails at once where a build would start waiting for the images'
    lock (rather than wait for it)."""

    def __init__(self) -> None:
        super().__init__(quiet=True)

    def say(self, message: str) -> None:
        assert not message.startswith("waiting for another image build"), message
        super().say(message)


def unchanged(path: Path) -> tuple[int, int, int, int]:
    """What rewriting or replacing ``path`` changes: device, inode, size, mtime."""
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


# ------------------------------------------------------------------------------ fixtures


@dataclass
class Layout:
    """The archive unpacked: index, manifests and configs by image name."""

    root: Path
    index: dict[str, Any]
    manifests: dict[str, dict[str, Any]]
    configs: dict[str, dict[str, Any]]

    def blob(self, digest: str) -> Path:
        algorithm, hexdigest = digest.split(":", 1)
        return self.root / "blobs" / algorithm / hexdigest

    def layer_digests(self) -> set[str]:
        return {layer["digest"] for m in self.manifests.values() for layer in m["layers"]}


@pytest.fixture(scope="module")
def pause_binary() -> Path:
    try:
        return binaries.resolve(["pause"], out=Progress(interval=15.0))["pause"]
    except ClusterError as err:
        skip_or_fail(f"no pause binary: {err}")
        raise


@pytest.fixture(scope="module")
def built(pause_binary: Path) -> images.BuiltImages:
    reason = _unavailable()
    if reason:
        skip_or_fail(reason)
    return images.build_images(TAG, out=Progress(interval=15.0), pause_binary=pause_binary)


@pytest.fixture(scope="module")
def layout(built: images.BuiltImages, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    root = tmp_path_factory.mktemp("layout")
    with tarfile.open(built.archive) as tar:
        for member in tar.getmembers():
            assert member.isdir() or member.isfile(), member.name
            assert not member.name.startswith("/") and ".." not in member.name.split("/")
        subprocess.run(["tar", "-x", "-f", str(built.archive), "-C", str(root)], check=True)
    index = json.loads((root / "index.json").read_text())
    manifests: dict[str, dict[str, Any]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for desc in index["manifests"]:
        name = desc["annotations"]["io.containerd.image.name"]
        algorithm, hexdigest = desc["digest"].split(":", 1)
        manifests[name] = json.loads((root / "blobs" / algorithm / hexdigest).read_text())
        config = manifests[name]["config"]["digest"].split(":", 1)[1]
        configs[name] = json.loads((root / "blobs" / "sha256" / config).read_text())
    return Layout(root, index, manifests, configs)


@pytest.fixture(scope="module")
def rootfs(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Each image's root file system, its layers unpacked in order (images with the same
    layers share one). Images share their lower layers (base, the venvs' shared layer):
    a root starts as a hard-linked copy of the root of its layers but the last, which a
    layer above never changes (``test_venv_layers_split``), and only its last layer is
    unpacked."""
    made: dict[tuple[str, ...], Path] = {}

    def root_of(layers: tuple[str, ...]) -> Path:
        if layers not in made:
            root = tmp_path_factory.mktemp("rootfs")
            root.chmod(0o755)  # as a snapshot's root is; mktemp makes it 0700
            if len(layers) > 1:
                below = root_of(layers[:-1])
                subprocess.run(["cp", "-a", "-l", f"{below}/.", str(root)], check=True)
            subprocess.run(
                ["tar", "-x", "-z", "-f", str(layout.blob(layers[-1])), "-C", str(root)],
                check=True,
            )
            made[layers] = root
        return made[layers]

    roots = {
        name: root_of(tuple(layer["digest"] for layer in manifest["layers"]))
        for name, manifest in layout.manifests.items()
    }
    yield roots
    for root in made.values():
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------ the archive


@pytest.mark.integration
def test_names_and_result(built: images.BuiltImages) -> None:
    assert set(built.images) == ALL_NAMES
    assert images.archive_names(built.archive) == sorted(ALL_NAMES)
    for info in built.images.values():
        assert info.digest.startswith("sha256:") and len(info.digest) == 71
        assert 0 < info.size < info.unpacked_size
    base = {info.layers[0] for name, info in built.images.items() if name in SERVICE_NAMES}
    assert len(base) == 1, "the service images share one base layer"
    shared = {info.layers[1] for name, info in built.images.items() if name in SERVICE_NAMES}
    assert len(shared) == 1, "the service images share one venv layer"
    # base, shared, a third-party layer for some, their own; each stored once
    assert all(len(built.images[name].layers) in (3, 4) for name in SERVICE_NAMES)
    own = {built.images[name].layers[-1] for name in SERVICE_NAMES}
    assert len(own) == len(images.VENVS)
    third_party = {built.images[n].layers[2] for n in SERVICE_NAMES} - own
    assert len(built.layers) == 2 + len(third_party) + len(own) + 1  # with pause's
    assert built.base_packages["python3.11"].startswith("3.11.")


@pytest.mark.integration
def test_archive_is_an_oci_layout(built: images.BuiltImages, layout: Layout) -> None:
    with tarfile.open(built.archive) as tar:
        names = tar.getnames()
    blob_names = sorted(f"blobs/sha256/{p.name}" for p in (layout.root / "blobs/sha256").iterdir())
    assert names == ["blobs", "blobs/sha256", *blob_names, "index.json", "oci-layout"]
    assert json.loads((layout.root / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert layout.index["schemaVersion"] == 2
    blobs = sorted((layout.root / "blobs" / "sha256").iterdir())
    for blob in blobs:
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    referenced: set[str] = set()

    def check(desc: dict[str, Any], media_type: str) -> None:
        assert desc["mediaType"] == media_type
        path = layout.blob(desc["digest"])
        assert path.is_file(), desc
        assert path.stat().st_size == desc["size"], desc
        referenced.add(path.name)

    for desc in layout.index["manifests"]:
        check(desc, "application/vnd.oci.image.manifest.v1+json")
        assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
        name = desc["annotations"]["io.containerd.image.name"]
        assert desc["annotations"]["org.opencontainers.image.ref.name"] == name.rsplit(":")[-1]
        manifest = layout.manifests[name]
        assert manifest["schemaVersion"] == 2
        check(manifest["config"], "application/vnd.oci.image.config.v1+json")
        for layer in manifest["layers"]:
            check(layer, "application/vnd.oci.image.layer.v1.tar+gzip")
        config = layout.configs[name]
        assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"])
        assert built.images[name].digest == desc["digest"]
    assert referenced == {blob.name for blob in blobs}, "no blob is left unreferenced"


@pytest.mark.integration
def test_configs(layout: Layout) -> None:
    for spec in images.IMAGES:
        config = layout.configs[spec.ref(TAG)]
        assert config["architecture"] == "amd64" and config["os"] == "linux"
        epoch = time.gmtime(images.source_date_epoch())
        assert config["created"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", epoch)
        run = config["config"]
        assert run["User"] == "65532:65532"
        assert run["Entrypoint"] == ["/opt/steward/venv/bin/python", *spec.args]
        assert run["Env"] == EXPECTED_ENV
        assert run["WorkingDir"] == "/tmp"
        assert "Cmd" not in run
    pause = layout.configs[images.PAUSE_IMAGE]["config"]
    assert pause["User"] == "65535:65535"
    assert pause["Entrypoint"] == ["/pause"]


_entries: dict[Path, tuple[str, int, list[tarfile.TarInfo]]] = {}


def _members(layout: Layout, digest: str) -> tuple[str, int, list[tarfile.TarInfo]]:
    """A layer's uncompressed digest, size and entries (read once per session)."""
    blob = layout.blob(digest)
    if blob not in _entries:
        with gzip.open(blob) as raw:
            data = raw.read()
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = tar.getmembers()
        _entries[blob] = (f"sha256:{hashlib.sha256(data).hexdigest()}", len(data), members)
    return _entries[blob]


@pytest.mark.integration
def test_layers_root_owned_read_only_reproducible_entries(
    built: images.BuiltImages, layout: Layout
) -> None:
    epoch = images.source_date_epoch()
    diff_ids = {
        layer["digest"]: layout.configs[name]["rootfs"]["diff_ids"][i]
        for name, manifest in layout.manifests.items()
        for i, layer in enumerate(manifest["layers"])
    }
    for digest in sorted(layout.layer_digests()):
        diff_id, size, members = _members(layout, digest)
        assert diff_id == diff_ids[digest]
        assert built.layers[digest].unpacked_size == size
        assert _in_walk_order([m.name for m in members]), built.layers[digest].description
        for m in members:
            where = f"{built.layers[digest].description}: {m.name}"
            assert (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", ""), where
            assert m.mtime == epoch, where
            assert m.isdir() or m.isfile() or m.issym(), where
            assert not m.mode & 0o6000, f"setuid/setgid {where}"
            if m.isdir() and m.name in ("tmp",):
                assert m.mode == 0o1777, where
            elif not m.issym():
                assert not m.mode & 0o022, f"writable by group or others: {where}"
                assert m.mode & 0o444 == 0o444, f"not readable by all: {where}"
            assert not m.pax_headers.keys() - {"path", "linkpath"}, where


def _in_walk_order(names: list[str]) -> bool:
    """Every parent before its children, and the children of a directory in byte order
    (the order write_tar walks in, so the same tree always gives the same tar)."""
    seen: set[str] = set()
    last_child: dict[str, bytes] = {}
    for name in names:
        parent, _, base = name.rpartition("/")
        if parent and parent not in seen:
            return False
        if last_child.get(parent, b"") >= base.encode():
            return False
        last_child[parent] = base.encode()
        seen.add(name)
    return True


@pytest.mark.integration
def test_base_layer_is_stripped(built: images.BuiltImages, layout: Layout) -> None:
    base = built.images[images.IMAGES[0].ref(TAG)].layers[0]
    _, _, members = _members(layout, base)
    names = {m.name for m in members}
    files = {m.name for m in members if m.isfile()}
    for gone in ("var/lib/apt/lists", "var/cache/apt", "etc/apt", "etc/resolv.conf"):
        assert not any(n == gone or n.startswith(gone + "/") for n in names), gone
    assert not [n for n in files if n.startswith("var/log/")]
    assert not [n for n in files if n.startswith(("usr/share/man/", "usr/share/locale/"))]
    docs = [n for n in files if n.startswith("usr/share/doc/")]
    assert docs and all(n.endswith("/copyright") for n in docs)
    assert not [n for n in names if n.startswith("dev/")]
    for shell in ("usr/bin/sh", "usr/bin/bash", "usr/bin/dash", "usr/bin/apt", "usr/bin/dpkg"):
        assert shell not in names, f"{shell}: the base has no shell or package manager"
    assert {"usr/bin/python3.11", "etc/passwd", "etc/group", "etc/nsswitch.conf"} <= names
    assert "var/lib/dpkg/status.d/python3.11" in files
    assert "usr/lib/python3.11/__pycache__/os.cpython-311.pyc" in files


# ------------------------------------------------------------------------ the venvs' split

SITE = "opt/steward/venv/lib/python3.11/site-packages"


def _normalize(name: str) -> str:
    """A distribution's name as its dist-info directory spells it (PEP 503, then ``_``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _exported_names(packages: tuple[str, ...]) -> set[str]:
    """The third-party distributions ``uv export`` locks for ``packages``, normalised."""
    cmd = [find_uv(), "export", "--frozen", "--no-dev", "--no-emit-workspace", "--no-hashes"]
    cmd += ["--format", "requirements.txt", "--no-header", "--no-annotate"]
    for package in packages:
        cmd += ["--package", package]
    root = binaries.repo_root()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=root)
    return {
        _normalize(re.split(r"[=;\s]", line, maxsplit=1)[0])
        for line in done.stdout.split("\n")
        if line
    }


@dataclass(frozen=True)
class VenvLayer:
    """A venv layer's entries: every path → whether it is a directory; its dist-infos
    by normalised name; its regular files."""

    entries: dict[str, bool]
    dists: dict[str, str]
    files: set[str]


def _venv_layer(layout: Layout, digest: str) -> VenvLayer:
    _, _, members = _members(layout, digest)
    entries = {m.name: m.isdir() for m in members}
    dists = {}
    for name in entries:
        parent, _, base = name.rpartition("/")
        if parent == SITE and base.endswith(".dist-info"):
            dists[_normalize(base.removesuffix(".dist-info").rsplit("-", 1)[0])] = name
    return VenvLayer(entries, dists, {m.name for m in members if m.isfile() or m.issym()})


def _recorded(layout: Layout, digest: str, layer: VenvLayer) -> set[str]:
    """The files the RECORDs of ``layer``'s dist-infos list (paths in the layer), with
    the bytecode of each module they list."""
    blob = layout.blob(digest)
    with tarfile.open(blob, "r:gz") as tar:
        records = {d: tar.extractfile(f"{d}/RECORD") for d in layer.dists.values()}
        text = {d: f.read().decode() for d, f in records.items() if f is not None}
    listed: set[str] = set()
    for record in text.values():
        for line in record.splitlines():
            rel = os.path.normpath(f"{SITE}/{line.rsplit(',', 2)[0]}")
            listed.add(rel)
            if rel.endswith(".py"):
                parent, _, module = rel.rpartition("/")
                listed.add(f"{parent}/__pycache__/{module[:-3]}.cpython-311.pyc")
    return listed


def _uncompiled(layer: VenvLayer) -> list[str]:
    """The modules of ``layer`` without their bytecode beside them in the layer."""
    missing = []
    for name in sorted(layer.files):
        if name.startswith(f"{SITE}/") and name.endswith(".py"):
            parent, _, module = name.rpartition("/")
            if f"{parent}/__pycache__/{module[:-3]}.cpython-311.pyc" not in layer.files:
                missing.append(name)
    return missing


@pytest.mark.integration
def test_venv_layers_split(built: images.BuiltImages, layout: Layout) -> None:
    """The shared layer: the venv's skeleton, steward and the third-party packages every
    venv locks, no controller. A venv's third-party layer (when it needs more): those
    packages alone, shared by the venvs that need the same. Its own layer: its
    distributions alone. Every file of a layer one of its distributions' (their RECORDs,
    and bytecode), none that a layer below holds; one layer each, whichever images carry
    it."""
    informer = built.images[images.IMAGES[0].ref(TAG)]
    shared = _venv_layer(layout, informer.layers[1])
    assert {
        f"{SITE}/steward/__pycache__/__init__.cpython-311.pyc",
        "opt/steward/venv/pyvenv.cfg",
        "opt/steward/venv/bin/python",
    } <= shared.files
    assert all(n == "opt" or n.startswith("opt/") for n in shared.entries)
    exported = {v.name: _exported_names(v.packages) for v in images.VENVS}
    common = set.intersection(*exported.values())
    assert {"grpcio", "protobuf", "opentelemetry_sdk", "kubernetes"} <= common
    assert set(shared.dists) == common | {"steward"}
    skeleton = {"pyvenv.cfg", "bin/python", "bin/python3", "bin/python3.11"}
    unrecorded = shared.files - _recorded(layout, informer.layers[1], shared)
    assert unrecorded == {f"opt/steward/venv/{n}" for n in skeleton}
    assert not [n for n in shared.files if n.endswith(("uv_cache.json", "direct_url.json"))]
    assert _uncompiled(shared) == []
    chains: dict[str, set[tuple[str, ...]]] = {}
    for spec in images.IMAGES:
        chains.setdefault(spec.venv, set()).add(built.images[spec.ref(TAG)].layers[2:])
    assert all(len(c) == 1 for c in chains.values()), chains
    for venv in images.VENVS:
        (chain,) = chains[venv.name]
        extras = exported[venv.name] - common
        workspace = {_normalize(p) for p in venv.packages}
        if venv.name == "services":
            workspace |= {"steward_serving"}
        expected = [extras, workspace] if extras else [workspace]
        assert len(chain) == len(expected), venv.name
        below = dict(shared.entries)
        for digest, dists in zip(chain, expected, strict=True):
            layer = _venv_layer(layout, digest)
            assert set(layer.dists) == dists, venv.name
            clashes = [p for p, d in layer.entries.items() if p in below and not (d and below[p])]
            assert clashes == [], venv.name
            below.update(layer.entries)
            assert layer.files <= _recorded(layout, digest, layer), venv.name
            assert _uncompiled(layer) == [], venv.name
            assert not [n for n in layer.files if n.endswith(("uv_cache.json", "direct_url.json"))]
    # The certificate and service-account-token controllers need the same packages
    # beyond the shared ones (cryptography): one layer serves both.
    certs = next(s for s in images.IMAGES if s.service == "controller-csrsigning").venv
    tokens = next(s for s in images.IMAGES if s.service == "controller-serviceaccount-token").venv
    assert exported[certs] - common == exported[tokens] - common != set()
    assert next(iter(chains[certs]))[0] == next(iter(chains[tokens]))[0]


@pytest.mark.integration
@pytest.mark.parametrize(
    "venv", [v for v in images.VENVS if v.name != "services"], ids=lambda v: v.name
)
def test_controller_image_declares_its_controllers_alone(
    venv: images.Venv, layout: Layout, rootfs: dict[str, Path]
) -> None:
    """``python -m steward list`` in a controller's image names the controllers of its
    distribution, no other: its entry points are in its own layer, none in the shared."""
    specs = [s for s in images.IMAGES if s.venv == venv.name]
    name = specs[0].ref(TAG)
    run = layout.configs[name]["config"]
    chroot = _which("chroot")
    assert chroot
    done = subprocess.run(
        [chroot, f"--userspec={run['User']}", str(rootfs[name]), "python", "-m", "steward", "list"],
        env=dict(item.split("=", 1) for item in run["Env"]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == sorted(s.args[-1] for s in specs)


# ---------------------------------------------------------------------------- running them


@pytest.mark.integration
@pytest.mark.parametrize("spec", images.IMAGES, ids=lambda s: s.name)
def test_entrypoint_runs_as_nonroot(
    spec: images.ImageSpec, layout: Layout, rootfs: dict[str, Path]
) -> None:
    name = spec.ref(TAG)
    run = layout.configs[name]["config"]
    chroot = _which("chroot")
    assert chroot
    done = subprocess.run(
        [chroot, f"--userspec={run['User']}", str(rootfs[name]), *run["Entrypoint"], "--help"],
        env=dict(item.split("=", 1) for item in run["Env"]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout


# Imports every extension module of the standard library (lib-dynload) and of the venv:
# each shared library they link must be in the image.
_IMPORT_EXTENSIONS = """
import importlib, pathlib, sys
site = pathlib.Path(sys.prefix, "lib", "python3.11", "site-packages")
names = [p.name.split(".")[0] for p in pathlib.Path(sys.base_prefix, "lib", "python3.11",
         "lib-dynload").glob("*.so")]
for so in site.rglob("*.so"):
    for suffix in (".cpython-311-x86_64-linux-gnu.so", ".abi3.so"):
        if so.name.endswith(suffix):
            rel = so.relative_to(site)
            names.append(".".join([*rel.parts[:-1], so.name[: -len(suffix)]]))
failed = []
for name in sorted(names):
    try:
        importlib.import_module(name)
    except Exception as err:
        failed.append(f"{name}: {err!r}")
print(len(names), failed)
sys.exit(1 if failed else 0)
"""


@pytest.mark.integration
@pytest.mark.parametrize("venv", [v.name for v in images.VENVS])
def test_extension_modules_load(venv: str, layout: Layout, rootfs: dict[str, Path]) -> None:
    name = next(spec.ref(TAG) for spec in images.IMAGES if spec.venv == venv)
    run = layout.configs[name]["config"]
    chroot = _which("chroot")
    assert chroot
    done = subprocess.run(
        [
            chroot,
            f"--userspec={run['User']}",
            str(rootfs[name]),
            "python",
            "-c",
            _IMPORT_EXTENSIONS,
        ],
        env=dict(item.split("=", 1) for item in run["Env"]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    count = int(done.stdout.split()[0])
    assert count > 50, done.stdout  # 46 of the standard library, grpcio's, orjson's, …


@pytest.mark.integration
def test_pause_runs(layout: Layout, rootfs: dict[str, Path]) -> None:
    chroot = _which("chroot")
    assert chroot
    root = rootfs[images.PAUSE_IMAGE]
    assert sorted(p.name for p in root.iterdir()) == ["pause"]
    done = subprocess.run(
        [chroot, "--userspec=65535:65535", str(root), "/pause", "-version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pause ")


@pytest.mark.integration
def test_informer_in_runc_read_only(
    layout: Layout, rootfs: dict[str, Path], tmp_path: Path
) -> None:
    """The informer's image as a container: read-only root, tmpfs /tmp, its user and
    environment from the image configuration."""
    runc = _which("runc")
    assert runc
    name = images.IMAGES[0].ref(TAG)
    run = layout.configs[name]["config"]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    subprocess.run([runc, "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    uid, gid = (int(x) for x in run["User"].split(":"))
    spec["process"].update(
        terminal=False,
        args=[*run["Entrypoint"], "--help"],
        env=run["Env"],
        cwd=run["WorkingDir"],
        user={"uid": uid, "gid": gid},
    )
    spec["root"] = {"path": str(rootfs[name]), "readonly": True}
    spec["mounts"].append(
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]}
    )
    (bundle / "config.json").write_text(json.dumps(spec))
    state = tmp_path / "runc-state"
    container = f"steward-images-test-{os.getpid()}"
    try:
        done = subprocess.run(
            [runc, "--root", str(state), "run", "--bundle", str(bundle), container],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        subprocess.run(
            [runc, "--root", str(state), "delete", "--force", container],
            capture_output=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: steward-informer"), done.stdout


# ------------------------------------------------------------------------------ containerd


def _mounts_under(root: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(root) or point.startswith(f"{root}/"):
            found.append(point)
    return found


def _processes_naming(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[str]:
    """A containerd of this test alone (own root, state and socket; no CRI), stopped and
    cleaned up afterwards: its socket's address."""
    base = Path(f"/tmp/steward-ctd-{os.getpid()}")  # short: socket paths are limited
    if base.exists():
        shutil.rmtree(base)
    base.mkdir()
    sock = base / "containerd.sock"
    config = base / "config.toml"
    config.write_text(
        "\n".join(
            [
                "version = 2",
                f'root = "{base}/root"',
                f'state = "{base}/state"',
                'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
                "[grpc]",
                f'  address = "{sock}"',
                "[ttrpc]",
                f'  address = "{sock}.ttrpc"',
                "[debug]",
                '  address = ""',
                "[metrics]",
                '  address = ""',
                '[plugins."io.containerd.internal.v1.opt"]',
                f'  path = "{base}/opt"',
                "",
            ]
        )
    )
    log = (tmp_path / "containerd.log").open("w")
    proc = subprocess.Popen(
        ["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            ok = subprocess.run(
                ["ctr", "--address", str(sock), "version"], capture_output=True, check=False
            )
            if ok.returncode == 0:
                break
            assert proc.poll() is None, (tmp_path / "containerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not answer in 30 s"
            time.sleep(0.2)
        yield str(sock)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        for point in sorted(_mounts_under(base), key=len, reverse=True):
            subprocess.run(["umount", "--lazy", point], check=False)
        left_mounts = _mounts_under(base)
        left = _processes_naming(str(config))
        shutil.rmtree(base, ignore_errors=True)
        assert not left_mounts, left_mounts
        assert not left, f"processes left: {left}"


@pytest.mark.integration
def test_import_into_containerd(built: images.BuiltImages, containerd: str) -> None:
    imported = images.import_into_containerd(built.archive, address=containerd)
    assert sorted(imported) == sorted(ALL_NAMES)
    listed = subprocess.run(
        ["ctr", "--address", containerd, "-n", "k8s.io", "images", "ls"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = {line.split()[0]: line.split()[2] for line in listed.stdout.splitlines()[1:]}
    for name, info in built.images.items():
        assert rows.get(name) == info.digest, listed.stdout


@pytest.mark.integration
def test_pause_archive_alone(built: images.BuiltImages, pause_binary: Path, tmp_path: Path) -> None:
    archive = images.build_pause_archive(
        pause_binary, out=Progress(quiet=True), output=tmp_path / "pause.tar"
    )
    assert images.archive_names(archive) == [images.PAUSE_IMAGE]
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    assert index["manifests"][0]["digest"] == built.images[images.PAUSE_IMAGE].digest


# ------------------------------------------------------------------------- cache, rebuild


@pytest.mark.integration
def test_second_build_is_cached(built: images.BuiltImages, pause_binary: Path) -> None:
    """Unchanged inputs: the cached archive is returned as it is. The build computes its
    key (``uv --version``, ``uv export``) and runs nothing else: no wheel, venv, layer or
    archive is made, and neither the archive nor its ``built.json`` is written again."""
    meta = built.archive.parent / "built.json"
    before = {path: unchanged(path) for path in (built.archive, meta)}
    with spawned() as commands:
        again = images.build_images(TAG, out=Progress(quiet=True), pause_binary=pause_binary)
    assert again.cached
    uv = find_uv()
    builders = [c for c in commands if not (c[0] == uv and c[1:2] in (["--version"], ["export"]))]
    assert builders == [], builders
    assert any(c[1:2] == ["export"] for c in commands), commands  # the recorder sees them
    assert {path: unchanged(path) for path in before} == before
    assert again.archive == built.archive
    assert {n: i.digest for n, i in again.images.items()} == {
        n: i.digest for n, i in built.images.items()
    }


REBUILT = ("informer", "manager", "controller-job", "controller-csrsigning")
"""The images the reproducibility check builds again: the shared layer and one of each
kind of own layer (the services', a controller's, a distribution with several
controllers and a third-party package of its own). The recipe is the same for every own
layer, so a rebuild of all of them would check the same thing again."""


@pytest.mark.integration
@pytest.mark.slow
def test_rebuild_is_reproducible(
    built: images.BuiltImages,
    pause_binary: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building again without the cache gives the same bytes: :data:`REBUILT` and pause,
    each image's manifest digest the same as in the whole set. The rebuild goes to a store
    of its own (the base layer linked from the module's, as a rebuild keeps it), so the
    module's archive stays as built, the side the rebuild is compared with."""
    base = images_root() / f"base-{built.base_key[:16]}"
    store = tmp_path / "store"
    (store / "images").mkdir(parents=True)
    (store / "images" / base.name).symlink_to(base, target_is_directory=True)
    monkeypatch.setenv("STEWARD_CACHE_DIR", str(store))
    again = images.build_images(
        TAG, out=Progress(interval=15.0), pause_binary=pause_binary, use_cache=False, only=REBUILT
    )
    assert again.archive.is_relative_to(store)
    assert not again.cached
    assert again.key != built.key  # a subset is cached apart from the whole set
    names = {f"docker.io/library/steward-{name}:{TAG}" for name in REBUILT}
    assert set(again.images) == names | {images.PAUSE_IMAGE}
    assert {n: i.digest for n, i in again.images.items()} == {
        n: i.digest for n, i in built.images.items() if n in again.images
    }


@pytest.mark.unit
def test_an_unknown_image_is_refused() -> None:
    with pytest.raises(images.ImageError, match="no such image: controller-nope"):
        images.build_images(TAG, out=Progress(quiet=True), only=("informer", "controller-nope"))


# ------------------------------------------------------------------------------ unit tests


def _tree(root: Path, mode: int) -> None:
    (root / "d" / "e").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)
    (root / "d" / "f.txt").write_text("text")
    (root / "d" / "f.txt").chmod(mode)
    (root / "d" / "run").write_text("#!/bin/sh\n")
    (root / "d" / "run").chmod(0o700)
    os.link(root / "d" / "f.txt", root / "d" / "e" / "hard")
    (root / "B").symlink_to("d/f.txt")
    (root / ("a" * 120)).write_text("long name")


@pytest.mark.unit
def test_write_tar_is_deterministic(tmp_path: Path) -> None:
    _tree(tmp_path / "one", 0o666)
    time.sleep(0.01)
    _tree(tmp_path / "two", 0o600)
    os.utime(tmp_path / "two" / "d" / "f.txt", (12345, 12345))
    first = images.write_tar(tmp_path / "one.tar", tmp_path / "one", epoch=7)
    second = images.write_tar(tmp_path / "two.tar", tmp_path / "two", epoch=7)
    assert first == second
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()
    with tarfile.open(tmp_path / "one.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert list(members) == ["B", "a" * 120, "d", "d/e", "d/e/hard", "d/f.txt", "d/run", "tmp"]
    assert members["d/f.txt"].mode == 0o644 and members["d/run"].mode == 0o755
    assert members["d/e/hard"].isfile() and members["d/e/hard"].size == 4
    assert members["tmp"].mode == 0o1777 and members["d"].mode == 0o755
    assert members["B"].issym() and members["B"].linkname == "d/f.txt"
    assert all(m.mtime == 7 and m.uid == 0 and m.gid == 0 for m in members.values())
    assert members["a" * 120].pax_headers == {"path": "a" * 120}


def _requirement(name: str, version: str) -> str:
    return f"{name}=={version} \\\n    --hash=sha256:{name}{version}"


@pytest.mark.unit
def test_split_layers() -> None:
    """What every venv locks alike is shared, entry by entry (its text: a version apart is
    not alike); the rest of a venv's requirements is its third-party layer, one for venvs
    that need the same; the workspace packages not all install are each venv's own."""
    steward = Member("steward", "0.1.0", Path("/src"))
    job = Member("steward-job-controller", "0.1.0", Path("/src/job"))
    certs = Member("steward-certificates-controllers", "0.1.0", Path("/src/certs"))
    tokens = Member("steward-serviceaccounttoken-controllers", "0.1.0", Path("/src/tokens"))
    grpc, six1, six2 = (_requirement(*r) for r in (("grpcio", "1"), ("six", "1"), ("six", "2")))
    crypto = _requirement("cryptography", "50")
    plans = split_layers(
        {
            "job": (f"# exported\n{grpc}\n{six1}\n", (steward, job)),
            "certs": (f"{crypto}\n{grpc}\n\n{six2}\n", (certs, steward)),
            "tokens": (f"{crypto}\n{grpc}\n{six2}\n", (steward, tokens)),
        }
    )
    assert plans.shared.requirements == f"{grpc}\n"
    assert plans.shared.members == (steward,)
    assert plans.third_party["job"].requirements == f"{six1}\n"
    assert plans.third_party["certs"].requirements == f"{crypto}\n{six2}\n"
    assert plans.third_party["certs"] == plans.third_party["tokens"] != plans.third_party["job"]
    assert plans.third_party["certs"].describe().endswith(": cryptography, six")
    assert [p.members for p in plans.own.values()] == [(job,), (certs,), (tokens,)]
    assert all(p.requirements == "" for p in plans.own.values())
    assert plans.chain("certs") == (plans.shared, plans.third_party["certs"], plans.own["certs"])
    layers = plans.layers(["tokens", "certs"])
    assert [p.name for p in layers] == [
        "shared",
        plans.third_party["certs"].name,
        "certs",
        "tokens",
    ]
    alone = split_layers({"only": (f"{grpc}\n", (steward,))})
    assert alone.third_party == {} and alone.own["only"].members == ()
    assert alone.chain("only") == (alone.shared, alone.own["only"])


@pytest.mark.unit
def test_conflicts_between_layers() -> None:
    shared = {"opt": True, "opt/site": True, "opt/site/a.py": False, "opt/site/d": True}
    own = {"opt": True, "opt/site": True, "opt/site/a.py": False, "opt/site/d": False}
    assert conflicts(shared, own) == ["opt/site/a.py", "opt/site/d"]
    assert conflicts(shared, {"opt": True, "opt/site": True, "opt/site/b.py": False}) == []


@pytest.mark.unit
def test_write_tar_refuses_devices(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "fifo")
    with pytest.raises(images.ImageError, match="not a file"):
        images.write_tar(tmp_path / "out.tar", root, epoch=0)


@pytest.mark.unit
def test_cli_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steward.images", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for flag in ("--tag", "--output", "--pause", "--no-cache", "--import"):
        assert flag in done.stdout
