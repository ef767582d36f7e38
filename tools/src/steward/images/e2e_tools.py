"""The command-line tools upstream's agnhost image carries and e2e specs run in it.

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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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


def ensure_tools(*, out: Progress, epoch: int | None = None, rebuild: bool = False) -> Tools:
    """The tools tree, built into the cache when missing (or ``rebuild``): needs root and
    mmdebstrap then."""
    epoch = source_date_epoch() if epoch is None else epoch
    key = tools_key(epoch)
    directory = images_root() / f"e2e-tools-{key[:16]}"
    meta = directory / "tools.json"
    if meta.is_file() and (directory / "tools.tar").is_file() and not rebuild:
        data = json.loads(meta.read_text())
        return Tools(key, directory / "tools.tar", data["packages"], data["size"])
    require_root("extracting the e2e tools (curl, netcat-openbsd, wget)")
    started = time.monotonic()
    out.say(f"e2e tools: mmdebstrap --variant=extract {SUITE} ({', '.join(TOOLS_PACKAGES)})")
    data = build_extracted_layer(
        label="e2e tools",
        directory=directory,
        layer="tools.tar",
        meta=meta,
        key=key,
        epoch=epoch,
        mmdebstrap=_mmdebstrap_args,
        finish=lambda root: {"packages": finish_tools(root, out)},
        out=out,
    )
    prune(images_root(), keep=2, prefix="e2e-tools-")
    out.say(
        f"e2e tools: {len(data['packages'])} packages, {data['size'] / 1e6:.1f} MB, built in "
        f"{time.monotonic() - started:.0f}s ({directory})"
    )
    return ensure_tools(out=out, epoch=epoch)


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
