"""The command-line tools upstream's agnhost image carries and e2e specs run in it, and
Debian's nginx for the nginx image.

Upstream's agnhost image is Alpine with ``curl``, ``netcat-openbsd``, busybox's
``wget`` and more (``test/images/agnhost/Dockerfile``). The specs of ``[sig-network]
Services`` and ``EndpointSlice`` run, inside an agnhost pod:

- ``curl -g -q -s --connect-timeout …`` (hairpin, session affinity, source IP, NodePort
  and ClusterIP checks): Debian's ``curl``;
- ``echo hostName | nc -v -t -w 2 <ip> <port>`` (``testEndpointReachability`` of the
  service jig, "service is not reachable within 2m0s" when it fails): OpenBSD netcat's
  options; busybox's ``nc`` refuses ``-v`` and ``-t``. Debian's ``netcat-openbsd``,
  ``/bin/nc`` linked to its ``/bin/nc.openbsd`` as its alternative would be;
- ``wget -T 5 -qO- <url>`` (``checkReachabilityFromPod``): Debian's busybox 1.35
  ``wget`` crashes (SIGSEGV) whenever ``-T`` is given; GNU ``wget`` (in ``/usr/bin``,
  ahead of busybox's ``/bin`` in the image's PATH) takes the same options.

They run under ``sh -c``, and Debian's busybox-static ``sh`` runs its own applet of a
command's name before looking at PATH (``FEATURE_SH_STANDALONE``; Alpine's does not), so
``nc`` and ``wget`` would still be busybox's: agnhost's ``/bin/sh`` is Debian's
``dash``, which finds commands on PATH (busybox's applets stay in ``/bin``).

:func:`ensure_tools` extracts those three packages and the libraries they link
(``mmdebstrap --variant=extract`` of Debian bookworm, as the base layer of Steward's
images: the packages' files, no maintainer script, no shell, apt or dpkg) into a tree
for agnhost's layer. The tree keeps Debian's split ``/bin``, ``/lib`` and ``/usr``
directories (no merged-``/usr`` symbolic links, which would hide busybox's ``/bin`` in
the layer below); the dynamic loader is ``/lib64/ld-linux-x86-64.so.2``. Removed: apt's
and dpkg's configuration and database (one ``/var/lib/dpkg/status.d/<package>`` file per
package stays), caches, logs, docs but the ``copyright`` files, man pages, locales and
the host's ``/etc/hostname``, ``/etc/resolv.conf`` and ``/etc/fstab``. Each tool is run
in the tree (``chroot``) before it is kept. Built once per machine (about 20 s, as root)
and cached under ``cache_root()/images/e2e-tools-<digest>/`` by a digest of the
packages, sources, mmdebstrap's arguments, the recipe and the epoch; bookworm's mirror
is the one input not pinned.

:func:`ensure_nginx` extracts Debian's ``nginx`` the same way and keeps of it only
``/usr/sbin/nginx``, the libraries it links (:data:`NGINX_LIBRARIES`, with the files
their links name), ``/etc/nginx/mime.types``, the welcome page
``/usr/share/nginx/html/index.html``, and the copyright files and ``status.d`` entries
of :data:`NGINX_KEEP_PACKAGES`; what apt brings along for the packages' maintainer
scripts and units (debconf, iproute2, Kerberos, ...) goes. It adds a configuration of
its own as upstream's image has it (:data:`NGINX_CONF`, :data:`NGINX_DEFAULT_SITE`:
port 80, ``/usr/share/nginx/html``), ``/etc/passwd`` with ``www-data``, the log links
to the container's output, ``/run`` and ``/var/lib/nginx`` (nginx makes its temporary
directories there when it starts), then runs ``nginx -v`` and ``nginx -t`` in the kept
tree (``chroot``), so a library missing from the list fails the build. Cached under
``cache_root()/images/e2e-nginx-<digest>/`` like the tools tree (about 10 MB).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steward.cluster.progress import Progress
from steward.images.base import (
    _DPKG_EXCLUDES,
    _STATUS_HOOK,
    SOURCES,
    SUITE,
    build_extracted_layer,
    prune_extracted,
)
from steward.images.common import (
    ImageError,
    images_root,
    prune,
    require_root,
    source_date_epoch,
)

TOOLS_RECIPE_VERSION = "2"
"""Bumped when what :func:`ensure_tools` makes changes in a way its inputs do not show."""

TOOLS_PACKAGES = ("curl", "dash", "netcat-openbsd", "wget")
"""Debian packages extracted for agnhost (with what they depend on): the tools, and
dash for ``/bin/sh``."""

TOOLS_CHECKS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("/usr/bin/curl", "--version"), "curl "),
    (("/bin/nc", "-h"), "OpenBSD netcat"),
    (("/usr/bin/wget", "--version"), "GNU Wget "),
    (("/bin/sh", "-c", "nc -h 2>&1; wget --version"), "OpenBSD netcat"),
)
"""Each command run in the extracted tree before it is kept, and what its output starts
with: every tool and the libraries it links are there (``nc -h`` exits 1 after its
usage, so its output alone is checked); ``sh -c`` finds the tools, not busybox's
applets."""

TOOLS_LINKS = {"bin/nc": "nc.openbsd", "bin/sh": "dash"}
"""What the packages' maintainer scripts would have linked (netcat-openbsd's
alternative for ``nc``, dash's ``/bin/sh``), over busybox's applets of those names."""

_TOOLS_REMOVE = (
    "etc/apt",
    "etc/dpkg",
    "etc/fstab",
    "etc/hostname",
    "etc/resolv.conf",
    "dev",
    "tmp",
    "var/cache",
    "var/log",
    "var/lib/apt",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/zsh",
)
"""Removed from the extracted tree (paths relative to its root)."""


@dataclass(frozen=True)
class Tools:
    """The cached tools tree: a tar of it (owners 0:0, the epoch's mtimes) and what it
    holds."""

    key: str
    tar: Path
    packages: dict[str, str]
    """Every extracted package (the tools and what they depend on) → its version."""
    size: int


def _mmdebstrap_args(tarball: Path) -> list[str]:
    return [
        "mmdebstrap",
        "--mode=root",
        "--variant=extract",
        f"--include={','.join(TOOLS_PACKAGES)}",
        "--skip=chroot/mount",
        '--aptopt=Acquire::Retries "3"',
        # No merged-usr hook: its /bin -> usr/bin link would replace busybox's /bin.
        f"--extract-hook={_STATUS_HOOK}",
        *(f"--dpkgopt={opt}" for opt in _DPKG_EXCLUDES),
        SUITE,
        str(tarball),
        *SOURCES,
    ]


def tools_key(epoch: int) -> str:
    """Digest of what the tools tree is made from (the mirror's content aside)."""
    recipe = {
        "mmdebstrap": _mmdebstrap_args(Path("OUT")),
        "remove": _TOOLS_REMOVE,
        "links": TOOLS_LINKS,
        "checks": TOOLS_CHECKS,
        "recipe": TOOLS_RECIPE_VERSION,
        "epoch": epoch,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _ensure_extracted(
    name: str,
    packages: Sequence[str],
    key: str,
    *,
    epoch: int,
    mmdebstrap: Callable[[Path], list[str]],
    finish: Callable[[Path], dict[str, Any]],
    why: str,
    rebuild: bool,
    out: Progress,
) -> Tools:
    """A tree of Debian packages extracted into the cache (``e2e-<name>-<key>``, its
    layer ``<name>.tar`` and ``<name>.json``) and finished by ``finish``: the cached one
    when present (unless ``rebuild``), else built, which needs root (``why``) and
    mmdebstrap; the two newest of each name are kept."""
    directory = images_root() / f"e2e-{name}-{key[:16]}"
    meta = directory / f"{name}.json"
    layer = directory / f"{name}.tar"
    if meta.is_file() and layer.is_file() and not rebuild:
        data = json.loads(meta.read_text())
        return Tools(key, layer, data["packages"], data["size"])
    require_root(why)
    started = time.monotonic()
    out.say(f"e2e {name}: mmdebstrap --variant=extract {SUITE} ({', '.join(packages)})")
    data = build_extracted_layer(
        label=f"e2e {name}",
        directory=directory,
        layer=layer.name,
        meta=meta,
        key=key,
        epoch=epoch,
        mmdebstrap=mmdebstrap,
        finish=finish,
        out=out,
    )
    prune(images_root(), keep=2, prefix=f"e2e-{name}-")
    out.say(
        f"e2e {name}: {len(data['packages'])} packages, {data['size'] / 1e6:.1f} MB, built in "
        f"{time.monotonic() - started:.0f}s ({directory})"
    )
    return _ensure_extracted(
        name,
        packages,
        key,
        epoch=epoch,
        mmdebstrap=mmdebstrap,
        finish=finish,
        why=why,
        rebuild=False,
        out=out,
    )


def ensure_tools(*, out: Progress, epoch: int | None = None, rebuild: bool = False) -> Tools:
    """The tools tree, built into the cache when missing (or ``rebuild``): needs root and
    mmdebstrap then."""
    epoch = source_date_epoch() if epoch is None else epoch
    return _ensure_extracted(
        "tools",
        TOOLS_PACKAGES,
        tools_key(epoch),
        epoch=epoch,
        mmdebstrap=_mmdebstrap_args,
        finish=lambda root: {"packages": finish_tools(root, out)},
        why="extracting the e2e tools (curl, netcat-openbsd, wget)",
        rebuild=rebuild,
        out=out,
    )


def finish_tools(root: Path, out: Progress) -> dict[str, str]:
    """The removals, the links and the checks of an extracted tree; its packages."""
    prune_extracted(root, _TOOLS_REMOVE)
    for link, target in TOOLS_LINKS.items():
        if not (root / link).parent.joinpath(target).is_file():
            raise ImageError(f"e2e tools: {link}'s target {target} was not extracted")
        if (root / link).is_symlink() and os.readlink(root / link) == target:
            continue  # the package ships it (dash's /bin/sh)
        (root / link).symlink_to(target)
    for name in ("bin", "lib64"):
        if (root / name).is_symlink():
            raise ImageError(f"e2e tools: /{name} is a symbolic link (merged /usr)")
    for argv, banner in TOOLS_CHECKS:
        said = run_in(root, argv)
        if not said.startswith(banner):
            raise ImageError(f"e2e tools: {' '.join(argv)} in the tree said {said[:500]!r}")
    packages: dict[str, str] = {}
    status = root / "var/lib/dpkg/status.d"
    for control in sorted(status.iterdir()) if status.is_dir() else []:
        fields = dict(
            line.split(": ", 1)
            for line in control.read_text().splitlines()
            if ": " in line and not line.startswith(" ")
        )
        packages[fields.get("Package", control.name)] = fields.get("Version", "?")
    missing = [p for p in TOOLS_PACKAGES if p not in packages]
    if missing:
        raise ImageError(f"e2e tools: not extracted: {missing} (found {sorted(packages)})")
    return packages


def run_in(root: Path, argv: Sequence[str]) -> str:
    """What ``argv`` prints (standard output, then error) run in the tree ``root``
    (``chroot``, as root), whatever its exit status."""
    chroot = shutil.which("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin")
    if chroot is None:
        raise ImageError("chroot (coreutils) was not found")
    done = subprocess.run(
        [chroot, str(root), *argv],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        timeout=60,
        check=False,
    )
    return done.stdout + done.stderr


def extract_tools(tools: Tools, root: Path) -> None:
    """Unpack the tools tree into ``root`` (a layer's tree being built)."""
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tools.tar) as tar:
        tar.extractall(root, filter="tar")


# ------------------------------------------------------------------------------ nginx

NGINX_RECIPE_VERSION = "2"
"""Bumped when what :func:`ensure_nginx` makes changes in a way its inputs do not show."""

NGINX_PACKAGES = ("nginx",)
"""Extracted for the nginx image (with what they depend on, of which
:data:`NGINX_KEEP_PACKAGES` are kept)."""

NGINX_KEEP_PACKAGES = (
    "libc6",
    "libcrypt1",
    "libpcre2-8-0",
    "libssl3",
    "nginx",
    "nginx-common",
    "zlib1g",
)
"""The packages whose files the nginx tree keeps (and whose ``status.d`` entries and
copyright files stay): nginx, its ``mime.types`` and welcome page, and the libraries it
links. The rest of what apt brings along (debconf, iproute2, Kerberos, ...) serves the
packages' maintainer scripts and ``systemd`` units, not a container."""

NGINX_LIBRARIES = (
    "ld-linux-x86-64.so.2",
    "libc.so.6",
    "libcrypt.so.1",
    "libcrypto.so.3",
    "libpcre2-8.so.0",
    "libssl.so.3",
    "libz.so.1",
)
"""What ``/usr/sbin/nginx`` links (its ``DT_NEEDED`` entries and the loader), found in
``/lib/x86_64-linux-gnu`` or ``/usr/lib/x86_64-linux-gnu`` with the files their links
name; :data:`NGINX_CHECKS` run nginx in the kept tree, so a missing one fails the
build."""

NGINX_KEEP = (
    "usr/sbin/nginx",
    "etc/nginx/mime.types",
    "usr/share/nginx/html/index.html",
    "lib64/ld-linux-x86-64.so.2",
)
"""Files kept besides the libraries, the copyright files and the ``status.d`` entries."""

NGINX_CONF = """\
user www-data;
worker_processes auto;

error_log /var/log/nginx/error.log notice;
pid /run/nginx.pid;

events {
    worker_connections 1024;
}

http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /var/log/nginx/access.log;
    sendfile on;
    keepalive_timeout 65;
    include /etc/nginx/conf.d/*.conf;
}
"""
"""``/etc/nginx/nginx.conf``: the settings of upstream's image (the Docker library's
``nginx:1.27-alpine``), with Debian's ``www-data`` for its ``nginx`` user; logs go to the
container's output through the links of :data:`NGINX_LOG_LINKS`."""

NGINX_DEFAULT_SITE = """\
server {
    listen 80;
    server_name localhost;

    location / {
        root /usr/share/nginx/html;
        index index.html index.htm;
    }
}
"""
"""``/etc/nginx/conf.d/default.conf``: port 80, ``/usr/share/nginx/html``, as upstream's
(which only listens on IPv6 too when its entry point script finds IPv6)."""

NGINX_LOG_LINKS = {
    "var/log/nginx/access.log": "/dev/stdout",
    "var/log/nginx/error.log": "/dev/stderr",
}
"""As upstream's image links them, so ``kubectl logs`` shows nginx's logs."""

NGINX_USERS = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
NGINX_GROUP = "root:x:0:\nwww-data:x:33:\nnobody:x:65534:\n"
NGINX_NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\n"

NGINX_CHECKS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("/usr/sbin/nginx", "-v"), "nginx version: nginx/"),
    (("/usr/sbin/nginx", "-e", "stderr", "-t"), "nginx: the configuration file"),
)
"""Run in the kept tree before it is kept: nginx and its libraries load, and the
configuration (with its user ``www-data``) parses."""


def _nginx_mmdebstrap_args(tarball: Path) -> list[str]:
    return [
        "mmdebstrap",
        "--mode=root",
        "--variant=extract",
        f"--include={','.join(NGINX_PACKAGES)}",
        "--skip=chroot/mount",
        '--aptopt=Acquire::Retries "3"',
        f"--extract-hook={_STATUS_HOOK}",
        *(f"--dpkgopt={opt}" for opt in _DPKG_EXCLUDES),
        SUITE,
        str(tarball),
        *SOURCES,
    ]


def nginx_key(epoch: int) -> str:
    """Digest of what the nginx tree is made from (the mirror's content aside)."""
    recipe = {
        "mmdebstrap": _nginx_mmdebstrap_args(Path("OUT")),
        "keep": [NGINX_KEEP_PACKAGES, NGINX_LIBRARIES, NGINX_KEEP],
        "files": [NGINX_CONF, NGINX_DEFAULT_SITE, NGINX_USERS, NGINX_GROUP, NGINX_NSSWITCH],
        "links": NGINX_LOG_LINKS,
        "checks": NGINX_CHECKS,
        "recipe": NGINX_RECIPE_VERSION,
        "epoch": epoch,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def ensure_nginx(*, out: Progress, epoch: int | None = None, rebuild: bool = False) -> Tools:
    """Debian's nginx as a tree for the nginx image's layer (:func:`finish_nginx`), built
    into the cache when missing (or ``rebuild``): needs root and mmdebstrap then."""
    epoch = source_date_epoch() if epoch is None else epoch
    return _ensure_extracted(
        "nginx",
        NGINX_PACKAGES,
        nginx_key(epoch),
        epoch=epoch,
        mmdebstrap=_nginx_mmdebstrap_args,
        finish=lambda root: {"packages": finish_nginx(root)},
        why="extracting Debian's nginx for the e2e nginx image",
        rebuild=rebuild,
        out=out,
    )


def _nginx_kept(root: Path) -> set[str]:
    """The paths (relative to ``root``) :func:`finish_nginx` keeps of the extracted tree."""
    kept = set(NGINX_KEEP)
    for library in NGINX_LIBRARIES:
        for directory in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"):
            path = root / directory / library
            if path.is_symlink() or path.exists():
                kept.add(f"{directory}/{library}")
                if path.is_symlink():
                    kept.add(f"{directory}/{os.readlink(path)}")
                break
        else:
            raise ImageError(f"e2e nginx: {library} was not extracted")
    for package in NGINX_KEEP_PACKAGES:
        kept.add(f"var/lib/dpkg/status.d/{package}")
        kept.add(f"usr/share/doc/{package}/copyright")
    missing = sorted(p for p in kept if not (root / p).is_symlink() and not (root / p).exists())
    missing = [p for p in missing if not p.startswith("usr/share/doc/")]
    if missing:
        raise ImageError(f"e2e nginx: not extracted: {missing}")
    return kept


def finish_nginx(root: Path) -> dict[str, str]:
    """Keep nginx, its libraries and data of the extracted tree, add its configuration,
    users and log links, run the checks; the kept packages → their versions."""
    kept = _nginx_kept(root)
    for directory, dirs, files in os.walk(root, topdown=False):
        for name in files + [d for d in dirs if (Path(directory) / d).is_symlink()]:
            path = Path(directory) / name
            if path.relative_to(root).as_posix() not in kept:
                path.unlink()
        for name in dirs:
            path = Path(directory) / name
            if not path.is_symlink() and not any(path.iterdir()):
                path.rmdir()
    for name in ("etc/nginx/conf.d", "var/lib/nginx", "var/log/nginx", "run"):
        (root / name).mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("etc/nginx/nginx.conf", NGINX_CONF),
        ("etc/nginx/conf.d/default.conf", NGINX_DEFAULT_SITE),
        ("etc/passwd", NGINX_USERS),
        ("etc/group", NGINX_GROUP),
        ("etc/nsswitch.conf", NGINX_NSSWITCH),
    ):
        (root / name).write_text(text)
    for name in ("bin", "lib64"):
        if (root / name).is_symlink():
            raise ImageError(f"e2e nginx: /{name} is a symbolic link (merged /usr)")
    for argv, banner in NGINX_CHECKS:
        said = run_in(root, argv)
        if banner not in said or ("-t" in argv and "test is successful" not in said):
            raise ImageError(f"e2e nginx: {' '.join(argv)} in the tree said {said[:500]!r}")
    # Made by ``nginx -t`` (its temporary directories and log files), made again at
    # start; the links come after the checks, whose chroot has no /dev.
    for child in sorted((root / "var/lib/nginx").iterdir()):
        shutil.rmtree(child)
    for child in sorted((root / "var/log/nginx").iterdir()):
        child.unlink()
    (root / "run/nginx.pid").unlink(missing_ok=True)
    for link, target in NGINX_LOG_LINKS.items():
        (root / link).symlink_to(target)
    packages: dict[str, str] = {}
    for package in NGINX_KEEP_PACKAGES:
        control = root / "var/lib/dpkg/status.d" / package
        fields = dict(
            line.split(": ", 1)
            for line in control.read_text().splitlines()
            if ": " in line and not line.startswith(" ")
        )
        packages[package] = fields.get("Version", "?")
    return packages
