"""The images upstream's e2e specs run (busybox, agnhost, nginx, pause), under their names.

:func:`build_e2e_archive` (``python -m steward.images --e2e``) writes an archive of the
images upstream's e2e specs ``[sig-apps] Job``, ``Deployment``, ``ReplicaSet`` and
``ReplicationController`` ``[Conformance]`` run, under the exact names e2e expects
(:data:`E2E_IMAGES`), so that a real node needs no registry:

================================================  ==========================================
image                                             what it is
================================================  ==========================================
registry.k8s.io/e2e-test-images/busybox:1.37.0-2  Debian's busybox-static (1.35), not 1.37
registry.k8s.io/e2e-test-images/agnhost:2.66.1    our build of agnhost, busybox for a shell
registry.k8s.io/e2e-test-images/agnhost:2.55      the same manifest as 2.66.1
registry.k8s.io/e2e-test-images/nginx:1.27.0-2    Debian's nginx (1.22) over busybox
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
  8081, 9376, 5000). The same layer carries the tools the ``[sig-network]`` specs run in
  agnhost pods (:mod:`steward.images.e2e_tools`): Debian's ``curl``, OpenBSD's ``nc``
  (``/bin/nc``, over busybox's, which refuses ``nc -v -t``) and GNU ``wget`` (in
  ``/usr/bin``, ahead of busybox's, whose ``wget -T`` crashes), with the libraries they
  link, ``/bin/sh`` Debian's ``dash`` (busybox's ``sh`` would run its own ``nc`` and
  ``wget`` whatever PATH says) and ``/etc/nsswitch.conf`` (``hosts: files dns``).
  **Both agnhost names carry this one build**: the Deployment specs roll from 2.55 to
  2.66.1, and only need the two to be different names that run. Not included from
  upstream's Alpine image: its other packages (bind-tools, iproute2, iperf, bash, socat,
  util-linux-misc), CoreDNS 1.6.2 and the fake registry's content, which the specs run
  here do not use; the user's home directory is owned by root. Porter's certificate and
  key are there, as upstream's Dockerfile adds them (``/localhost.crt``,
  ``/localhost.key``, read from the pinned module: :func:`porter_files`): the StatefulSet
  specs' readiness probe fetches ``/localhost.crt`` from ``test-webserver``.
- **nginx**: busybox's layer and Debian's nginx (:func:`~steward.images.e2e_tools.ensure_nginx`:
  ``/usr/sbin/nginx``, the libraries it links, ``mime.types`` and the welcome page in
  ``/usr/share/nginx/html``), configured as upstream's image (the Docker library's
  ``nginx:1.27-alpine``, mirrored unchanged by ``test/images/nginx``): ``Cmd ["nginx",
  "-g", "daemon off;"]``, port 80, as root with workers as ``www-data`` (Alpine's
  ``nginx``), logs linked to the container's output. What upstream's specs ask of
  ``imageutils.Nginx`` (``grep -rn imageutils.Nginx test/e2e`` in the pinned module): a
  container that starts and stays running (ReplicationController lifecycle
  ``[Conformance]``, the garbage collector's Deployments and ReplicaSets, EndpointSlice
  and Endpoints pods, local-volume StatefulSets), ``sh -c`` (the preStop hook spec, the
  storage specs' scripts, which replace the command), ``kubectl debug --image`` with
  ``sh -c "sleep 3600"``, and nothing more of nginx itself: no Linux spec probes or
  fetches its port 80, execs ``nginx -s`` or reads ``/usr/share/nginx/html``. The one
  that would notice busybox under it is ``[sig-windows]``'s hybrid network spec (Windows
  nodes only), whose ``nc -vz`` busybox's ``nc`` refuses. Differences from upstream's:
  nginx 1.22 (bookworm's) rather than 1.27, busybox's applets rather than Alpine's, no
  IPv6 listener (upstream's entry point script adds one when the container has IPv6), no
  entry point script (and so none of its ``NGINX_ENTRYPOINT_*`` or template options), no
  ``STOPSIGNAL SIGQUIT`` (a stop sends SIGTERM, nginx's fast shutdown); no dynamic
  modules (Debian loads them from ``modules-enabled``, which is left out).
- The layers and the archive are written as Steward's (:func:`write_tar`, umoci); the
  result is cached in ``cache_root()/images/e2e/<digest>/`` by a digest of the agnhost,
  pause and busybox binaries, busybox's copyright file, the tools and nginx trees, the recipe
  (:data:`E2E_RECIPE_VERSION`, names, configurations) and the epoch, and a cached result
  returns without waiting for the images' lock. Building needs umoci and busybox-static
  and takes a few seconds; the tools and nginx trees, once per machine, need root and
  mmdebstrap (about 20 s and 15 s).

:func:`build_consumer_archive` writes an archive of its own with
``registry.k8s.io/e2e-test-images/resource-consumer:1.14`` (:data:`RESOURCE_CONSUMER_IMAGE`):
the pinned module's resource consumer, which the ``[sig-autoscaling]`` specs load their
pods with, over busybox's layer (see :func:`build_consumer`). Only those specs need it, so
the archive above stays as it is for every other run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from steward.cluster import binaries
from steward.cluster.progress import Progress
from steward.images.common import (
    ImageError,
    InputsDigest,
    images_root,
    locked,
    require_tools,
    run,
    sha256_file,
    source_date_epoch,
)
from steward.images.e2e_tools import (
    NGINX_KEEP_PACKAGES,
    TOOLS_PACKAGES,
    Tools,
    ensure_nginx,
    ensure_tools,
    extract_tools,
)
from steward.images.layout import BuiltArchive, Layout, describe, write_tar
from steward.images.steward_images import PAUSE_IMAGE, PAUSE_USER, add_pause

E2E_RECIPE_VERSION = "5"
"""Bumped when what :func:`build_e2e` makes changes in a way its inputs do not show (the
images' trees, configurations or names)."""

BUSYBOX_IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
AGNHOST_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
AGNHOST_PREVIOUS_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.55"
"""The Deployment specs roll from this agnhost to :data:`AGNHOST_IMAGE`: the same image."""
NGINX_IMAGE = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"
"""Debian's nginx (1.22) under the name upstream's e2e specs run (``imageutils.Nginx``)."""
E2E_IMAGES: tuple[str, ...] = (
    AGNHOST_PREVIOUS_IMAGE,
    AGNHOST_IMAGE,
    BUSYBOX_IMAGE,
    NGINX_IMAGE,
    PAUSE_IMAGE,
)
"""The names :func:`build_e2e_archive`'s archive holds, in its index's (sorted) order."""

BUSYBOX_BINARY = Path("/bin/busybox")
"""Debian's busybox-static (a static binary; the dynamic ``busybox`` package's is not)."""
BUSYBOX_COPYRIGHT = Path("/usr/share/doc/busybox-static/copyright")
E2E_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Upstream's PATH (busybox's and Alpine's images)."""
AGNHOST_ENTRYPOINT = ("/agnhost",)
AGNHOST_CMD = ("pause",)
NGINX_CMD = ("nginx", "-g", "daemon off;")
NGINX_PORTS = ("80/tcp",)
"""Upstream's image's (the Docker library's ``nginx:1.27-alpine``) command and port;
its entry point script, which only adds configuration for options of its own, is not
there."""
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
_AGNHOST_NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\n"
"""glibc's (the tools'): the pod's /etc/hosts before DNS, as Alpine's musl does."""
_E2E_TAGS = {
    "agnhost": AGNHOST_IMAGE,
    "agnhost-previous": AGNHOST_PREVIOUS_IMAGE,
    "busybox": BUSYBOX_IMAGE,
    "nginx": NGINX_IMAGE,
    "pause": PAUSE_IMAGE,
}
"""umoci's internal tag of each image in the layout → its name."""


@dataclass(frozen=True)
class BuiltE2E(BuiltArchive):
    """What :func:`build_e2e` made: an archive of :data:`E2E_IMAGES`, both agnhost names
    with the same manifest, busybox's layer shared by busybox and agnhost."""

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


def _e2e_key(
    *,
    agnhost: Path,
    pause: Path,
    busybox: Path,
    tools: Tools,
    nginx: Tools,
    porter: dict[str, bytes],
    epoch: int,
) -> str:
    inputs = InputsDigest()
    recipe = {
        "version": E2E_RECIPE_VERSION,
        "images": _E2E_TAGS,
        "path": E2E_PATH,
        "agnhost": [AGNHOST_ENTRYPOINT, AGNHOST_CMD, AGNHOST_PORTS],
        "nginx": [NGINX_CMD, NGINX_PORTS],
        "files": [_E2E_USERS, _E2E_GROUP, _AGNHOST_USERS, _AGNHOST_GROUP, _AGNHOST_NSSWITCH],
        "pause": PAUSE_USER,
        "epoch": epoch,
    }
    inputs.feed("recipe", json.dumps(recipe, sort_keys=True).encode())
    for label, path in (
        ("agnhost", agnhost),
        ("pause", pause),
        ("busybox", busybox),
        ("tools", tools.tar),
        ("nginx", nginx.tar),
    ):
        inputs.feed(label, sha256_file(path).encode())
    copyright_ = BUSYBOX_COPYRIGHT.read_bytes() if BUSYBOX_COPYRIGHT.is_file() else b""
    inputs.feed("busybox copyright", copyright_)
    for name, content in sorted(porter.items()):
        inputs.feed(f"porter {name}", content)
    return inputs.hexdigest()


def _busybox_applets(busybox: Path, out: Progress) -> tuple[str, list[str]]:
    """``busybox``'s version line and its applets (from ``busybox --list``)."""
    banner = run([str(busybox)], out=out, label="busybox").splitlines()
    match = re.match(r"BusyBox (v\S+(?: \([^)]*\))?)", banner[0] if banner else "")
    version = match.group(1) if match else "unknown"
    listed = run([str(busybox), "--list"], out=out, label="busybox --list").split()
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


PORTER_FILES = ("localhost.crt", "localhost.key")
"""What upstream's agnhost Dockerfile adds at ``/`` from ``test/images/agnhost/porter``."""


def _module_cache() -> Path:
    """Go's module cache: ``$GOMODCACHE``, else the first ``$GOPATH`` entry's ``pkg/mod``,
    else ``~/go/pkg/mod`` (what ``go env GOMODCACHE`` says, without running go)."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    gopath = (os.environ.get("GOPATH") or "").split(os.pathsep)[0]
    return Path(gopath or Path.home() / "go") / "pkg" / "mod"


def porter_files() -> dict[str, bytes]:
    """Porter's test certificate and key (:data:`PORTER_FILES`), as the pinned
    ``k8s.io/kubernetes`` module has them in Go's module cache (there since agnhost was
    built from it)."""
    agnhost = binaries.TOOLS["agnhost"]
    # The module cache escapes capital letters as "!" and their lower case.
    escaped = re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), agnhost.pinned_module)
    porter = (
        _module_cache()
        / f"{escaped}@{agnhost.version()}"
        / "test"
        / "images"
        / "agnhost"
        / "porter"
    )
    try:
        return {name: (porter / name).read_bytes() for name in PORTER_FILES}
    except OSError as err:
        raise ImageError(
            f"porter's certificate is not in {porter} ({err.strerror}): build agnhost first "
            "(steward build agnhost), which downloads the module"
        ) from err


def _agnhost_tree(root: Path, agnhost: Path, tools: Tools, porter: dict[str, bytes]) -> None:
    """agnhost's layer over busybox's, as upstream's Dockerfile adds: the tools
    (:mod:`~steward.images.e2e_tools`), /agnhost, the /agnhost-2 link
    (entrypoint-tester), /uploads (netexec) and the users user-defined-in-image (1000)
    in group-defined-in-image (50000); and /var/tmp 1777, which upstream's Alpine base
    has (the DaemonSet surge spec's readiness probe touches a file there)."""
    extract_tools(tools, root)
    shutil.copyfile(agnhost, root / "agnhost")
    (root / "agnhost").chmod(0o755)
    (root / "agnhost-2").symlink_to("agnhost")
    (root / "uploads").mkdir()
    (root / "var" / "tmp").mkdir(parents=True, exist_ok=True)
    (root / "var" / "tmp").chmod(0o1777)
    (root / "home" / "user-defined-in-image").mkdir(parents=True)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "passwd").write_text(_AGNHOST_USERS)
    (root / "etc" / "group").write_text(_AGNHOST_GROUP)
    (root / "etc" / "nsswitch.conf").write_text(_AGNHOST_NSSWITCH)
    for name, content in porter.items():
        (root / name).write_bytes(content)
        (root / name).chmod(0o644)


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
    too when given. Needs umoci and, for the default busybox, busybox-static; root and
    mmdebstrap for the tools tree while it is not cached (:func:`ensure_tools`).
    """
    started = time.monotonic()
    epoch = source_date_epoch()
    if busybox_binary == BUSYBOX_BINARY:
        require_tools(("busybox-static",), out)
    for what, path in (
        ("agnhost", agnhost_binary),
        ("pause", pause_binary),
        ("busybox", busybox_binary),
    ):
        _static_elf(path, what)
    tools = ensure_tools(out=out, epoch=epoch)
    nginx = ensure_nginx(out=out, epoch=epoch)
    porter = porter_files()
    key = _e2e_key(
        agnhost=agnhost_binary,
        pause=pause_binary,
        busybox=busybox_binary,
        tools=tools,
        nginx=nginx,
        porter=porter,
        epoch=epoch,
    )
    archive = images_root() / "e2e" / key[:20] / "e2e-images.tar"

    def build() -> BuiltE2E:
        out.say(f"e2e images: building {', '.join(E2E_IMAGES)}")
        return _build_e2e(
            agnhost=agnhost_binary,
            pause=pause_binary,
            busybox=busybox_binary,
            tools=tools,
            nginx=nginx,
            porter=porter,
            epoch=epoch,
            key=key,
            archive=archive,
            started=started,
            out=out,
        )

    built = _cached_or_built(
        BuiltE2E, archive, build, use_cache=use_cache, started=started, out=out, what="e2e images"
    )
    return built.written_to(output)


_Built = TypeVar("_Built", bound=BuiltArchive)


def _cached_or_built(
    kind: type[_Built],
    archive: Path,
    build: Callable[[], _Built],
    *,
    use_cache: bool,
    started: float,
    out: Progress,
    what: str,
) -> _Built:
    """``archive``'s cached result (unless ``use_cache`` is false), else ``build()``'s,
    under the images' lock. The archive is in place before its built.json: a cached
    result needs no lock (so no wait for another build of Steward's images); once the
    lock is held, one may have been built meanwhile."""

    def cached() -> _Built | None:
        if not use_cache:
            return None
        return kind.from_cache(archive, started=started, out=out, what=what)

    built = cached()
    with contextlib.nullcontext() if built else locked(out):
        built = built or cached()
        if built is None:
            require_tools(("umoci",), out)
            built = build()
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


RESOURCE_CONSUMER_IMAGE = "registry.k8s.io/e2e-test-images/resource-consumer:1.14"
"""The image e2e's ``[sig-autoscaling]`` specs load their pods with (the pinned module's
``test/utils/image/manifest.go`` names 1.14)."""
CONSUMER_IMAGES: tuple[str, ...] = (RESOURCE_CONSUMER_IMAGE,)
"""The names :func:`build_consumer_archive`'s archive holds."""
CONSUMER_RECIPE_VERSION = "1"
"""Bumped when what :func:`build_consumer` makes changes in a way its inputs do not show."""
CONSUMER_ENTRYPOINT = ("/consumer",)
CONSUMER_PORTS = ("8080/tcp",)
CONSUMER_WORKDIR = "/"
"""The consumer starts ``./consume-cpu/consume-cpu``, relative to its working directory:
upstream's Debian base leaves it at ``/``; here it is set, not left to the runtime."""
_CONSUMER_TAGS = {"resource-consumer": RESOURCE_CONSUMER_IMAGE}


@dataclass(frozen=True)
class BuiltConsumer(BuiltArchive):
    """What :func:`build_consumer` made: an archive of :data:`CONSUMER_IMAGES`, busybox's
    layer (the same as :func:`build_e2e`'s) and the consumer's."""


def _consumer_key(*, consumer: Path, consume_cpu: Path, busybox: Path, epoch: int) -> str:
    inputs = InputsDigest()
    recipe = {
        "version": CONSUMER_RECIPE_VERSION,
        "images": _CONSUMER_TAGS,
        "path": E2E_PATH,
        "consumer": [CONSUMER_ENTRYPOINT, CONSUMER_PORTS, CONSUMER_WORKDIR],
        "files": [_E2E_USERS, _E2E_GROUP],
        "epoch": epoch,
    }
    inputs.feed("recipe", json.dumps(recipe, sort_keys=True).encode())
    for label, path in (("consumer", consumer), ("consume-cpu", consume_cpu), ("busybox", busybox)):
        inputs.feed(label, sha256_file(path).encode())
    copyright_ = BUSYBOX_COPYRIGHT.read_bytes() if BUSYBOX_COPYRIGHT.is_file() else b""
    inputs.feed("busybox copyright", copyright_)
    return inputs.hexdigest()


def build_consumer(
    *,
    consumer_binary: Path,
    consume_cpu_binary: Path,
    out: Progress,
    output: Path | None = None,
    use_cache: bool = True,
    busybox_binary: Path = BUSYBOX_BINARY,
) -> BuiltConsumer:
    """Build :data:`RESOURCE_CONSUMER_IMAGE` into an OCI image-layout archive of its own
    (only the ``[sig-autoscaling]`` specs run it), as upstream's Dockerfile
    (``test/images/resource-consumer``) makes it: ``/consumer`` (the pinned module's
    ``test/images/resource-consumer``, a static build) and
    ``/consume-cpu/consume-cpu`` (its ``consume-cpu``), ``Entrypoint ["/consumer"]``,
    port 8080, over busybox's layer in place of upstream's Debian base. Upstream's image
    also installs ``stress``, which only the memory specs run: it is left out, so those
    specs cannot run on this image.

    Cached in ``cache_root()/images/consumer/<key>/`` by the binaries' digests and the
    recipe, like :func:`build_e2e`; needs umoci and, for the default busybox,
    busybox-static.
    """
    started = time.monotonic()
    epoch = source_date_epoch()
    if busybox_binary == BUSYBOX_BINARY:
        require_tools(("busybox-static",), out)
    for what, path in (
        ("resource-consumer", consumer_binary),
        ("consume-cpu", consume_cpu_binary),
        ("busybox", busybox_binary),
    ):
        _static_elf(path, what)
    key = _consumer_key(
        consumer=consumer_binary,
        consume_cpu=consume_cpu_binary,
        busybox=busybox_binary,
        epoch=epoch,
    )
    archive = images_root() / "consumer" / key[:20] / "consumer-images.tar"

    def build() -> BuiltConsumer:
        out.say(f"consumer image: building {RESOURCE_CONSUMER_IMAGE}")
        return _build_consumer(
            consumer=consumer_binary,
            consume_cpu=consume_cpu_binary,
            busybox=busybox_binary,
            epoch=epoch,
            key=key,
            archive=archive,
            started=started,
            out=out,
        )

    built = _cached_or_built(
        BuiltConsumer,
        archive,
        build,
        use_cache=use_cache,
        started=started,
        out=out,
        what="consumer image",
    )
    return built.written_to(output)


def build_consumer_archive(
    *, consumer_binary: Path, consume_cpu_binary: Path, out: Progress, output: Path | None = None
) -> Path:
    """The archive of :data:`CONSUMER_IMAGES` (see :func:`build_consumer`) for
    :func:`import_into_containerd`."""
    return build_consumer(
        consumer_binary=consumer_binary,
        consume_cpu_binary=consume_cpu_binary,
        out=out,
        output=output,
    ).archive


@dataclass(frozen=True)
class _BusyboxLayer:
    path: Path
    diff_id: str
    size: int
    version: str
    applets: int

    def what(self) -> str:
        return f"busybox: Debian busybox-static {self.version}, {self.applets} applets in /bin"


def _busybox_layer(tmp: Path, busybox: Path, epoch: int, out: Progress) -> _BusyboxLayer:
    """busybox's layer (:func:`_busybox_tree`), written under ``tmp``."""
    version, applets = _busybox_applets(busybox, out)
    _busybox_tree(tmp / "busybox-root", busybox, applets)
    layer = tmp / "busybox-layer.tar"
    diff_id, size = write_tar(layer, tmp / "busybox-root", epoch=epoch)
    return _BusyboxLayer(layer, diff_id, size, version, len(applets))


def _build_consumer(
    *,
    consumer: Path,
    consume_cpu: Path,
    busybox: Path,
    epoch: int,
    key: str,
    archive: Path,
    started: float,
    out: Progress,
) -> BuiltConsumer:
    unpacked: dict[str, tuple[int, str]] = {}
    with tempfile.TemporaryDirectory(prefix=".tmp-consumer-", dir=images_root()) as tmp_name:
        tmp = Path(tmp_name)
        busybox_layer = _busybox_layer(tmp, busybox, epoch, out)
        unpacked[f"sha256:{busybox_layer.diff_id}"] = (busybox_layer.size, busybox_layer.what())
        root = tmp / "consumer-root"
        (root / "consume-cpu").mkdir(parents=True)
        shutil.copyfile(consumer, root / "consumer")
        shutil.copyfile(consume_cpu, root / "consume-cpu" / "consume-cpu")
        for program in (root / "consumer", root / "consume-cpu" / "consume-cpu"):
            program.chmod(0o755)
        consumer_layer = tmp / "consumer-layer.tar"
        diff_id, size = write_tar(consumer_layer, root, epoch=epoch)
        consumer_what = (
            "resource-consumer: /consumer and /consume-cpu/consume-cpu "
            "(k8s.io/kubernetes test/images/resource-consumer)"
        )
        unpacked[f"sha256:{diff_id}"] = (size, consumer_what)
        layout = Layout(tmp / "layout", epoch, out)
        layout.init()
        layout.new("resource-consumer")
        layout.add_layer("resource-consumer", busybox_layer.path, busybox_layer.what())
        layout.add_layer("resource-consumer", consumer_layer, consumer_what)
        layout.configure(
            "resource-consumer",
            user=None,
            entrypoint=CONSUMER_ENTRYPOINT,
            env=(("PATH", E2E_PATH),),
            workingdir=CONSUMER_WORKDIR,
            exposed_ports=CONSUMER_PORTS,
        )
        layout.write_archive(archive, _CONSUMER_TAGS)
        images, layers = describe(layout.path, unpacked)
    return BuiltConsumer.made(
        archive, images, layers, key=key, started=started, out=out, what="consumer image"
    )


def _build_e2e(
    *,
    agnhost: Path,
    pause: Path,
    busybox: Path,
    tools: Tools,
    nginx: Tools,
    porter: dict[str, bytes],
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
        busybox_layer = _busybox_layer(tmp, busybox, epoch, out)
        unpacked[f"sha256:{busybox_layer.diff_id}"] = (busybox_layer.size, busybox_layer.what())
        _agnhost_tree(tmp / "agnhost-root", agnhost, tools, porter)
        agnhost_layer = tmp / "agnhost-layer.tar"
        diff_id, size = write_tar(agnhost_layer, tmp / "agnhost-root", epoch=epoch)
        agnhost_what = (
            "agnhost: /agnhost (k8s.io/kubernetes test/images/agnhost), "
            f"Debian's {', '.join(TOOLS_PACKAGES)}"
        )
        unpacked[f"sha256:{diff_id}"] = (size, agnhost_what)

        layout = Layout(tmp / "layout", epoch, out)
        layout.init()
        layout.new("busybox")
        layout.add_layer("busybox", busybox_layer.path, busybox_layer.what())
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
        nginx_what = f"nginx: Debian's {', '.join(NGINX_KEEP_PACKAGES)}"
        unpacked[f"sha256:{sha256_file(nginx.tar)}"] = (nginx.size, nginx_what)
        layout.new("nginx")
        layout.add_layer("nginx", busybox_layer.path, busybox_layer.what())
        layout.add_layer("nginx", nginx.tar, nginx_what)
        layout.configure(
            "nginx",
            user=None,
            entrypoint=(),
            env=env,
            workingdir=None,
            cmd=NGINX_CMD,
            exposed_ports=NGINX_PORTS,
        )
        add_pause(layout, pause, tmp, epoch, unpacked)
        layout.write_archive(archive, _E2E_TAGS)
        images, layers = describe(layout.path, unpacked)
    return BuiltE2E.made(
        archive,
        images,
        layers,
        key=key,
        started=started,
        out=out,
        what="e2e images",
        busybox_version=busybox_layer.version,
        applets=busybox_layer.applets,
    )
