"""Importing an image archive into a node's containerd (``ctr images import``)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

from steward.images.common import ImageError


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
