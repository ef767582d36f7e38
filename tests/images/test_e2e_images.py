"""The images upstream's e2e specs run (steward.images.build_e2e), built and run for real.

The module builds the archive once (cached by its inputs: busybox, agnhost and pause
binaries, the tools and nginx trees), reads it as an OCI image layout (every blob
against its digest and size, the names, configurations and layer entries), builds it
again without the cache for the same bytes, then imports it into a containerd of the
test's own (``test_build``'s fixture: own root, state and socket, no CRI) and runs each
image with runc through ``ctr``: busybox's shell, agnhost's default command
(``pause``), ``--help`` and ``serve-hostname`` answering on 9376 inside its container,
nginx's default command answering ``GET /`` on port 80 with its workers as
``www-data``. Every container, cgroup, FIFO and runc state directory is the test's own
and is removed afterwards.

Building needs umoci and busybox-static, not root; running needs root, containerd, ctr
and runc (``make node-packages``). The agnhost binary is ``steward build``'s when it
has one, else built here from the pinned ``k8s.io/kubernetes`` module (Go). Without
them the tests skip, except in CI, where they fail.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward import images
from steward.cluster import binaries
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress
from steward.images import e2e_images
from tests.conftest import skip_or_fail
from tests.images import test_build as _build

# The containerd of test_build (its own root, state and socket; no CRI plugin) and the
# pause binary, shared rather than copied.
containerd = _build.containerd
pause_binary = _build.pause_binary

NAMESPACE = "k8s.io"
CGROUP_PARENT = f"steward-e2e-images-{os.getpid()}"
"""Every container's cgroup is under this one (in each hierarchy), removed afterwards."""
BUILD_TOOLS = ("umoci",)
RUN_TOOLS = ("containerd", "ctr", "runc")


def _require_running() -> None:
    if os.geteuid() != 0:
        skip_or_fail("running the images with containerd needs root")
    absent = [name for name in RUN_TOOLS if _build._which(name) is None]
    if absent:
        skip_or_fail(f"not installed: {', '.join(absent)} (make node-packages)")


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def agnhost_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """steward build's agnhost, or one built here from the pinned module (CGO off)."""
    if "agnhost" in binaries.TOOLS:
        try:
            return binaries.resolve(["agnhost"], out=Progress(interval=15.0))["agnhost"]
        except ClusterError as err:
            skip_or_fail(f"no agnhost binary: {err}")
    go = shutil.which("go")
    if go is None:
        skip_or_fail("no agnhost binary: the go command is not on PATH")
        raise AssertionError("unreachable")
    out = tmp_path_factory.mktemp("agnhost") / "agnhost"
    done = subprocess.run(
        [go, "build", "-trimpath", "-o", str(out), "k8s.io/kubernetes/test/images/agnhost"],
        cwd=binaries.repo_root() / "deploy" / "tools" / "kubernetes",
        env=binaries.go_env(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        skip_or_fail(f"building agnhost failed: {done.stderr.strip()[-2000:]}")
    return out


@pytest.fixture(scope="module")
def built(agnhost_binary: Path, pause_binary: Path) -> images.BuiltE2E:
    absent = [name for name in BUILD_TOOLS if _build._which(name) is None]
    if absent or not images.BUSYBOX_BINARY.is_file():
        skip_or_fail(f"not installed: {', '.join(absent) or 'busybox-static'}")
    try:
        return images.build_e2e(
            agnhost_binary=agnhost_binary, pause_binary=pause_binary, out=Progress(interval=15.0)
        )
    except ClusterError as err:
        skip_or_fail(f"building the e2e images: {err}")
        raise


@pytest.fixture(scope="module")
def layout(built: images.BuiltE2E, tmp_path_factory: pytest.TempPathFactory) -> _build.Layout:
    root = tmp_path_factory.mktemp("e2e-layout")
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
    return _build.Layout(root, index, manifests, configs)


def _entries(layout: _build.Layout, digest: str) -> tuple[str, dict[str, tarfile.TarInfo]]:
    """A layer's uncompressed digest and its entries by name."""
    with gzip.open(layout.blob(digest)) as raw:
        data = raw.read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert _build._in_walk_order([m.name for m in members])
    return f"sha256:{hashlib.sha256(data).hexdigest()}", {m.name: m for m in members}


# ------------------------------------------------------------------------------ the archive


@pytest.mark.integration
def test_names(built: images.BuiltE2E) -> None:
    assert images.E2E_IMAGES == (
        "registry.k8s.io/e2e-test-images/agnhost:2.55",
        "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
        "registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
        "registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
        "registry.k8s.io/pause:3.10.2",
    )
    assert images.archive_names(built.archive) == list(images.E2E_IMAGES)
    assert sorted(built.images) == list(images.E2E_IMAGES)
    old, new = built.images[images.AGNHOST_PREVIOUS_IMAGE], built.images[images.AGNHOST_IMAGE]
    assert old.digest == new.digest, "both agnhost names carry the one build"
    busybox = built.images[images.BUSYBOX_IMAGE]
    assert new.layers[0] == busybox.layers[0], "agnhost is busybox's layer and its own"
    assert len(new.layers) == 2 and len(busybox.layers) == 1
    nginx = built.images[images.NGINX_IMAGE]
    assert nginx.layers[0] == busybox.layers[0], "nginx is busybox's layer and its own"
    assert len(nginx.layers) == 2 and nginx.layers[1] != new.layers[1]
    assert len(built.layers) == 4
    for info in built.images.values():
        assert 0 < info.size < info.unpacked_size
    assert built.busybox_version.startswith("v1.")
    assert built.applets > 200


@pytest.mark.integration
def test_archive_is_an_oci_layout(built: images.BuiltE2E, layout: _build.Layout) -> None:
    with tarfile.open(built.archive) as tar:
        names = tar.getnames()
        assert all(m.isdir() or m.isfile() for m in tar.getmembers())
    blobs = sorted((layout.root / "blobs" / "sha256").iterdir())
    assert names == [
        "blobs",
        "blobs/sha256",
        *(f"blobs/sha256/{b.name}" for b in blobs),
        "index.json",
        "oci-layout",
    ]
    assert json.loads((layout.root / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert layout.index["schemaVersion"] == 2
    for blob in blobs:
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    referenced: set[str] = set()

    def check(desc: dict[str, Any], media_type: str) -> None:
        assert desc["mediaType"] == media_type
        path = layout.blob(desc["digest"])
        assert path.is_file() and path.stat().st_size == desc["size"], desc
        referenced.add(path.name)

    for desc in layout.index["manifests"]:
        check(desc, "application/vnd.oci.image.manifest.v1+json")
        assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
        name = desc["annotations"]["io.containerd.image.name"]
        assert desc["annotations"]["org.opencontainers.image.ref.name"] == name.rsplit(":")[-1]
        assert built.images[name].digest == desc["digest"]
        manifest = layout.manifests[name]
        check(manifest["config"], "application/vnd.oci.image.config.v1+json")
        for layer in manifest["layers"]:
            check(layer, "application/vnd.oci.image.layer.v1.tar+gzip")
        assert len(layout.configs[name]["rootfs"]["diff_ids"]) == len(manifest["layers"])
    assert referenced == {blob.name for blob in blobs}, "no blob is left unreferenced"


@pytest.mark.integration
def test_configs(layout: _build.Layout) -> None:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(images.source_date_epoch()))
    path = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    busybox = layout.configs[images.BUSYBOX_IMAGE]
    assert busybox["created"] == created
    assert (busybox["architecture"], busybox["os"]) == ("amd64", "linux")
    # As upstream's: root (no User), no working directory, no entry point, CMD ["sh"].
    assert busybox["config"] == {"Env": path, "Cmd": ["sh"]}
    # As upstream's agnhost Dockerfile: ENTRYPOINT ["/agnhost"], CMD ["pause"], EXPOSE.
    agnhost = layout.configs[images.AGNHOST_IMAGE]["config"]
    assert agnhost == {
        "Env": path,
        "Entrypoint": ["/agnhost"],
        "Cmd": ["pause"],
        "ExposedPorts": {f"{port}/tcp": {} for port in (80, 8080, 8081, 9376, 5000)},
    }
    # As upstream's (nginx:1.27-alpine) but its entry point script: root, nginx in front.
    nginx = layout.configs[images.NGINX_IMAGE]["config"]
    assert nginx == {
        "Env": path,
        "Cmd": ["nginx", "-g", "daemon off;"],
        "ExposedPorts": {"80/tcp": {}},
    }
    pause = layout.configs[images.PAUSE_IMAGE]["config"]
    assert pause["User"] == "65535:65535" and pause["Entrypoint"] == ["/pause"]


@pytest.mark.integration
def test_layers(built: images.BuiltE2E, layout: _build.Layout) -> None:
    epoch = images.source_date_epoch()
    diff_ids = layout.configs[images.AGNHOST_IMAGE]["rootfs"]["diff_ids"]
    busybox_digest, agnhost_digest = built.images[images.AGNHOST_IMAGE].layers
    entries: dict[str, dict[str, tarfile.TarInfo]] = {}
    for digest, diff_id in zip((busybox_digest, agnhost_digest), diff_ids, strict=True):
        found, entries[digest] = _entries(layout, digest)
        assert found == diff_id
        for m in entries[digest].values():
            assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", epoch), m.name
            assert m.isdir() or m.isfile() or m.issym(), m.name
            assert not m.mode & 0o6000, m.name
    busybox = entries[busybox_digest]
    assert busybox["bin/busybox"].isfile() and busybox["bin/busybox"].mode == 0o755
    assert busybox["bin/busybox"].size == images.BUSYBOX_BINARY.stat().st_size
    listed = subprocess.run(
        [str(images.BUSYBOX_BINARY), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    applets = {n.removeprefix("bin/") for n, m in busybox.items() if m.issym()}
    assert applets == set(listed) - {"busybox"}
    assert len(applets) == built.applets
    assert all(busybox[f"bin/{a}"].linkname == "busybox" for a in applets)
    assert {"sh", "env", "wget", "sleep", "id", "hostname"} <= applets
    assert busybox["tmp"].mode == 0o1777
    passwd = _file(layout, busybox_digest, "etc/passwd")
    assert passwd.startswith("root:x:0:0:") and "\nnobody:x:65534:65534:" in passwd
    assert _file(layout, busybox_digest, "etc/group") == "root:x:0:\nnobody:x:65534:\n"
    agnhost = entries[agnhost_digest]
    assert agnhost["agnhost"].isfile() and agnhost["agnhost"].mode == 0o755
    assert agnhost["agnhost-2"].issym() and agnhost["agnhost-2"].linkname == "agnhost"
    assert agnhost["uploads"].isdir()
    assert agnhost["var/tmp"].isdir() and agnhost["var/tmp"].mode == 0o1777
    assert "user-defined-in-image:x:1000:1000:" in _file(layout, agnhost_digest, "etc/passwd")
    group = _file(layout, agnhost_digest, "etc/group")
    assert "group-defined-in-image:x:50000:user-defined-in-image" in group
    # Porter's certificate, which the StatefulSet specs' readiness probe fetches.
    for name, content in images.porter_files().items():
        assert agnhost[name].isfile() and agnhost[name].mode == 0o644, name
        assert _file(layout, agnhost_digest, name) == content.decode()
    assert "BEGIN CERTIFICATE" in _file(layout, agnhost_digest, "localhost.crt")


@pytest.mark.integration
def test_nginx_layer(built: images.BuiltE2E, layout: _build.Layout) -> None:
    epoch = images.source_date_epoch()
    _, nginx_digest = built.images[images.NGINX_IMAGE].layers
    found, nginx = _entries(layout, nginx_digest)
    assert found == layout.configs[images.NGINX_IMAGE]["rootfs"]["diff_ids"][1]
    for m in nginx.values():
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", epoch), m.name
        assert m.isdir() or m.isfile() or m.issym(), m.name
    assert nginx["usr/sbin/nginx"].isfile() and nginx["usr/sbin/nginx"].mode == 0o755
    assert "Welcome to nginx!" in _file(layout, nginx_digest, "usr/share/nginx/html/index.html")
    site = _file(layout, nginx_digest, "etc/nginx/conf.d/default.conf")
    assert "listen 80;" in site and "root /usr/share/nginx/html;" in site
    assert nginx["var/log/nginx/access.log"].linkname == "/dev/stdout"
    assert nginx["var/log/nginx/error.log"].linkname == "/dev/stderr"
    assert "\nwww-data:x:33:33:" in _file(layout, nginx_digest, "etc/passwd")
    # Only nginx's own packages: no shell, apt, dpkg, perl or iproute2 of apt's choosing,
    # and nothing the checks left behind (temporary directories, logs, pid file).
    status = {n.removeprefix("var/lib/dpkg/status.d/") for n in nginx if "status.d/" in n}
    assert status == {
        "libc6",
        "libcrypt1",
        "libpcre2-8-0",
        "libssl3",
        "nginx",
        "nginx-common",
        "zlib1g",
    }
    assert not [n for n in nginx if n.startswith(("bin/", "sbin/", "usr/bin/"))]
    assert not [n for n in nginx if n.startswith(("var/lib/nginx/", "run/"))]
    assert nginx["var/log/nginx"].isdir() and nginx["run"].isdir()
    assert sum(m.size for m in nginx.values()) < 16_000_000


def _file(layout: _build.Layout, digest: str, name: str) -> str:
    with tarfile.open(layout.blob(digest)) as tar:
        member = tar.extractfile(name)
        assert member is not None, name
        return member.read().decode()


@pytest.mark.integration
def test_pause_is_build_pause_archives(
    built: images.BuiltE2E, pause_binary: Path, tmp_path: Path
) -> None:
    alone = images.build_pause_archive(
        pause_binary, out=Progress(quiet=True), output=tmp_path / "pause.tar"
    )
    with tarfile.open(alone) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    assert index["manifests"][0]["digest"] == built.images[images.PAUSE_IMAGE].digest


@pytest.mark.integration
def test_second_build_is_cached(
    built: images.BuiltE2E, agnhost_binary: Path, pause_binary: Path, tmp_path: Path
) -> None:
    """Unchanged inputs: the cached archive is returned as it is, without waiting for the
    images' lock (held here, as a build of Steward's images would hold it), without a
    subprocess (no umoci, no tar) and without writing the archive or its built.json."""
    meta = built.archive.parent / "built.json"
    before = {path: _build.unchanged(path) for path in (built.archive, meta)}
    with _build.images_lock_held(), _build.spawned() as commands:
        again = images.build_e2e(
            agnhost_binary=agnhost_binary, pause_binary=pause_binary, out=_build.NoWaiting()
        )
    assert again.cached
    assert commands == []
    assert {path: _build.unchanged(path) for path in before} == before
    assert again.archive == built.archive and again.key == built.key
    path = images.build_e2e_archive(
        agnhost_binary=agnhost_binary,
        pause_binary=pause_binary,
        out=Progress(quiet=True),
        output=tmp_path / "copy.tar",
    )
    assert path == tmp_path / "copy.tar"
    assert path.read_bytes() == built.archive.read_bytes()


@pytest.mark.integration
def test_rebuild_is_reproducible(
    built: images.BuiltE2E, agnhost_binary: Path, pause_binary: Path, tmp_path: Path
) -> None:
    """Building again without the cache gives the same bytes. The rebuild writes the same
    cache path as the module's build, so the first build's bytes are read before it."""
    first = built.archive.read_bytes()
    again = images.build_e2e(
        agnhost_binary=agnhost_binary,
        pause_binary=pause_binary,
        out=Progress(quiet=True),
        use_cache=False,
        output=tmp_path / "again.tar",
    )
    assert not again.cached and again.key == built.key
    assert (tmp_path / "again.tar").read_bytes() == first


@pytest.mark.integration
def test_cli_prints_names_sizes_and_archive(
    built: images.BuiltE2E, agnhost_binary: Path, pause_binary: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "steward.images",
            "--e2e",
            "--agnhost-binary",
            str(agnhost_binary),
            "--pause-binary",
            str(pause_binary),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for name in images.E2E_IMAGES:
        assert name in done.stdout
    assert f"archive: {built.archive} (" in done.stdout
    assert "cached in" in done.stdout


# ---------------------------------------------------------------------- containerd, runc


class Ctr:
    """``ctr`` against the test's containerd in namespace k8s.io, with runc's state, FIFOs
    and cgroups of the test's own; removes every container it made."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.base = Path(address).parent
        self.made: list[str] = []

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", self.address, "--namespace", NAMESPACE, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run(
        self,
        image: str,
        *argv: str,
        detach: bool = False,
        null_io: bool = False,
        timeout: float = 60,
    ) -> tuple[str, subprocess.CompletedProcess[str]]:
        """Run ``image`` (with ``argv`` as its whole command line, if any) in a new
        container: to its end (``--rm``), or detached; ``null_io``: its standard streams
        are /dev/null (ctr never closes a container's standard input otherwise)."""
        cid = f"steward-e2e-{os.getpid()}-{len(self.made)}"
        self.made.append(cid)
        opts = ["--snapshotter", "overlayfs", "--cgroup", f"/{CGROUP_PARENT}/{cid}"]
        opts += ["--runc-root", str(self.base / "runc"), "--fifo-dir", str(self.base / "fifo")]
        opts.append("--detach" if detach else "--rm")
        if null_io:
            opts.append("--null-io")
        return cid, self("run", *opts, image, cid, *argv, timeout=timeout)

    def exec(
        self, cid: str, *argv: str, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        opts = ["--exec-id", f"exec-{time.monotonic_ns()}", "--fifo-dir", str(self.base / "fifo")]
        if user is not None:
            opts += ["--user", user]
        return self("task", "exec", *opts, cid, *argv)

    def status(self, cid: str) -> str:
        listed = self("task", "ls").stdout.splitlines()[1:]
        return next((row.split()[2] for row in listed if row.split()[0] == cid), "")

    def wait_status(self, cid: str, wanted: str, *, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while self.status(cid) != wanted:
            assert time.monotonic() < deadline, f"{cid} not {wanted}: {self.status(cid)!r}"
            time.sleep(0.2)

    def remove_all(self) -> None:
        for cid in self.made:
            if self.status(cid):
                self("task", "kill", "--signal", "SIGKILL", cid)
                self("task", "rm", "--force", cid)
            self("containers", "rm", cid)
        left = self("containers", "ls", "--quiet").stdout.split()
        assert not left, f"containers left: {left}"


def _cgroups() -> list[Path]:
    return sorted(Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}"))


@pytest.fixture
def machine_left_as_it_was() -> Iterator[None]:
    """Requested before ``containerd``, so it checks after containerd stopped: no cgroup
    of the test's is left (they are removed), nor a shim, and the /run/containerd that
    the shims' sockets need is removed when it was not there before."""
    _require_running()
    run_dir = Path("/run/containerd")
    existed = run_dir.exists()
    yield
    for parent in _cgroups():
        for below, _, _ in sorted(os.walk(parent), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(below)
    if not existed and run_dir.exists():
        for below, _, _ in sorted(os.walk(run_dir), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(below)  # only empty directories
    assert not _cgroups(), _cgroups()
    shims = _build._processes_naming(f"/tmp/steward-ctd-{os.getpid()}/")
    assert not shims, f"processes left: {shims}"


@pytest.fixture
def ctr(machine_left_as_it_was: None, built: images.BuiltE2E, containerd: str) -> Iterator[Ctr]:
    """The test's containerd with the archive imported."""
    imported = images.import_into_containerd(built.archive, address=containerd)
    assert imported == list(images.E2E_IMAGES)
    client = Ctr(containerd)
    try:
        yield client
    finally:
        client.remove_all()


@pytest.mark.integration
def test_import_lists_every_name(ctr: Ctr, built: images.BuiltE2E) -> None:
    listed = ctr("images", "ls")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[2] for line in listed.stdout.splitlines()[1:]}
    assert rows == {name: info.digest for name, info in built.images.items()}


@pytest.mark.integration
def test_busybox_runs(ctr: Ctr) -> None:
    _, done = ctr.run(images.BUSYBOX_IMAGE, "sh", "-c", "echo ok; id; env; ls -ld /tmp")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "ok"
    assert lines[1].startswith("uid=0(root) gid=0(root)")
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in lines
    assert lines[-1].startswith("drwxrwxrwt")
    # The image's own command, sh, with nothing on its standard input: exits 0.
    _, done = ctr.run(images.BUSYBOX_IMAGE, null_io=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_agnhost_help_lists_its_commands(ctr: Ctr) -> None:
    _, done = ctr.run(images.AGNHOST_PREVIOUS_IMAGE, "/agnhost", "--help")
    assert done.returncode == 0, done.stderr
    for command in ("netexec", "serve-hostname", "pause", "test-webserver"):
        assert f"  {command} " in done.stdout, done.stdout


@pytest.mark.integration
def test_agnhost_pauses_by_default_and_has_a_shell(ctr: Ctr) -> None:
    cid, done = ctr.run(images.AGNHOST_IMAGE, detach=True)
    assert done.returncode == 0, done.stderr
    ctr.wait_status(cid, "RUNNING")
    ps = ctr.exec(cid, "sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '")
    assert ps.returncode == 0, ps.stderr
    assert ps.stdout.strip() == "/agnhost pause"
    ids = ctr.exec(cid, "id", "user-defined-in-image")
    assert ids.stdout.startswith("uid=1000(user-defined-in-image) gid=1000"), ids.stdout
    assert "50000(group-defined-in-image)" in ids.stdout, ids.stdout
    as_user = ctr.exec(cid, "id", "-u", user="user-defined-in-image")
    assert as_user.stdout.strip() == "1000", as_user.stderr
    ctr("task", "kill", "--signal", "SIGTERM", cid)
    ctr.wait_status(cid, "STOPPED")


@pytest.mark.integration
def test_agnhost_serves_hostname(ctr: Ctr) -> None:
    cid, done = ctr.run(images.AGNHOST_IMAGE, "/agnhost", "serve-hostname", detach=True)
    assert done.returncode == 0, done.stderr
    ctr.wait_status(cid, "RUNNING")
    hostname = ctr.exec(cid, "hostname").stdout.strip()
    assert hostname
    deadline = time.monotonic() + 30
    while True:
        got = ctr.exec(cid, "wget", "-q", "-O", "-", "http://127.0.0.1:9376/")
        if got.returncode == 0:
            break
        assert time.monotonic() < deadline, got.stderr
        time.sleep(0.3)
    assert got.stdout.strip() == hostname


@pytest.mark.integration
def test_nginx_serves_port_80(ctr: Ctr) -> None:
    """What upstream's specs ask of ``imageutils.Nginx``: its default command keeps
    running and serves HTTP on port 80; ``sh -c`` (preStop hooks, scripts of the storage
    specs), ``ls`` and ``mv`` run in it."""
    cid, done = ctr.run(images.NGINX_IMAGE, detach=True)
    assert done.returncode == 0, done.stderr
    ctr.wait_status(cid, "RUNNING")
    deadline = time.monotonic() + 30
    while True:
        got = ctr.exec(cid, "wget", "-q", "-O", "-", "http://127.0.0.1:80/")
        if got.returncode == 0:
            break
        assert time.monotonic() < deadline, got.stderr
        time.sleep(0.3)
    assert "<title>Welcome to nginx!</title>" in got.stdout
    missing = ctr.exec(cid, "wget", "-q", "-O", "-", "http://127.0.0.1/absent")
    assert missing.returncode != 0
    ps = ctr.exec(cid, "sh", "-c", "ps -o user,args | grep '[n]ginx:'; ls /usr/share/nginx/html")
    assert ps.returncode == 0, ps.stderr
    assert "nginx: master process nginx -g daemon off;" in ps.stdout
    workers = [line for line in ps.stdout.splitlines() if "worker process" in line]
    assert workers and all(line.split()[0] == "www-data" for line in workers), ps.stdout
    assert ps.stdout.splitlines()[-1] == "index.html"
    ctr("task", "kill", "--signal", "SIGQUIT", cid)
    ctr.wait_status(cid, "STOPPED")


# ------------------------------------------------------------------- the resource consumer


@pytest.fixture(scope="module")
def consumer(built: images.BuiltE2E) -> images.BuiltConsumer:
    """The resource consumer's archive, from steward build's binaries of the pinned module
    (``built`` first: the same busybox and umoci checks)."""
    try:
        paths = binaries.resolve(["resource-consumer", "consume-cpu"], out=Progress(interval=15.0))
        return images.build_consumer(
            consumer_binary=paths["resource-consumer"],
            consume_cpu_binary=paths["consume-cpu"],
            out=Progress(interval=15.0),
        )
    except ClusterError as err:
        skip_or_fail(f"building the resource consumer image: {err}")
        raise


@pytest.mark.integration
def test_consumer_archive(consumer: images.BuiltConsumer, built: images.BuiltE2E) -> None:
    assert images.CONSUMER_IMAGES == ("registry.k8s.io/e2e-test-images/resource-consumer:1.14",)
    assert images.archive_names(consumer.archive) == list(images.CONSUMER_IMAGES)
    info = consumer.images[images.RESOURCE_CONSUMER_IMAGE]
    busybox = built.images[images.BUSYBOX_IMAGE]
    assert len(info.layers) == 2 and info.layers[0] == busybox.layers[0], (
        "the consumer is busybox's layer (the very same) and its own"
    )
    assert "/consume-cpu/consume-cpu" in consumer.layers[info.layers[1]].description


@pytest.mark.integration
def test_consumer_serves_and_consumes_cpu(ctr: Ctr, consumer: images.BuiltConsumer) -> None:
    """What e2e's autoscaling specs do to a consumer pod: POST ``/ConsumeCPU`` to port
    8080, after which it runs ``./consume-cpu/consume-cpu`` from its working directory
    for the given time (a wrong path or working directory only logs an error)."""
    imported = images.import_into_containerd(consumer.archive, address=ctr.address)
    assert imported == list(images.CONSUMER_IMAGES)
    cid, done = ctr.run(images.RESOURCE_CONSUMER_IMAGE, detach=True, null_io=True)
    assert done.returncode == 0, done.stderr
    ctr.wait_status(cid, "RUNNING")
    url = "http://127.0.0.1:8080/ConsumeCPU?millicores=20&durationSec=60"
    deadline = time.monotonic() + 30
    while True:
        got = ctr.exec(cid, "wget", "-q", "-O", "-", "--post-data=", url)
        if got.returncode == 0:
            break
        assert time.monotonic() < deadline, got.stderr
        time.sleep(0.3)
    assert got.stdout.split() == ["ConsumeCPU", "20", "millicores", "60", "durationSec"]
    wanted = "./consume-cpu/consume-cpu -millicores=20 -duration-sec=60"
    deadline = time.monotonic() + 30
    while True:
        ps = ctr.exec(cid, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo")
        if wanted in ps.stdout:
            break
        assert time.monotonic() < deadline, f"no {wanted!r} among {ps.stdout!r} {ps.stderr}"
        time.sleep(0.3)
    get = ctr.exec(cid, "wget", "-q", "-O", "-", "http://127.0.0.1:8080/ConsumeCPU")
    assert get.returncode != 0, "only POST consumes"
    ctr("task", "kill", "--signal", "SIGKILL", cid)
    ctr.wait_status(cid, "STOPPED")


# ------------------------------------------------------------------------------ unit tests


@pytest.mark.unit
def test_dynamic_or_foreign_binaries_are_refused(tmp_path: Path) -> None:
    dynamic = next(p for p in (Path("/usr/bin/ls"), Path("/bin/ls")) if p.is_file())
    with pytest.raises(images.ImageError, match="dynamically linked"):
        e2e_images._static_elf(dynamic, "agnhost")
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n" + "#" * 80 + "\n")
    with pytest.raises(images.ImageError, match="not a 64-bit"):
        e2e_images._static_elf(script, "agnhost")
    with pytest.raises(images.ImageError, match="No such file"):
        e2e_images._static_elf(tmp_path / "absent", "agnhost")


@pytest.mark.unit
def test_cli_e2e_flags() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward.images", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    done = run("--help")
    assert done.returncode == 0, done.stderr
    assert "--e2e" in done.stdout and "--agnhost-binary" in done.stdout
    done = run("--agnhost-binary", "/nonexistent")
    assert done.returncode == 2 and "--agnhost-binary goes with --e2e" in done.stderr
    done = run("--e2e", "--tag", "other", "--agnhost-binary", "/nonexistent")
    assert done.returncode == 2 and "do not apply to --e2e" in done.stderr
