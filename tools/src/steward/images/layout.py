"""OCI image layouts: deterministic layer tars, umoci's layouts and what they hold.

**Layers and archive** are written deterministically (:func:`write_tar`): parents
before children and names in byte order, uid/gid 0, mtime ``SOURCE_DATE_EPOCH``
(default 0), modes normalised (0755 for directories and executables, 0644 otherwise),
PAX headers only for long names (no times). umoci (``raw add-layer``, ``config``)
compresses the layers (in parallel: about 1.3 s for a 200 MB venv) and writes the
manifests and configs; its output was measured byte-for-byte reproducible once every
timestamp is given, so building twice from the same inputs gives the same manifest
digests and the same archive.
The index then names each manifest ``io.containerd.image.name`` (what ``ctr images
import`` uses) and ``org.opencontainers.image.ref.name`` = TAG.
"""

from __future__ import annotations

import json
import os
import stat
import tarfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Self

from steward.cluster.progress import Progress
from steward.images.common import (
    ImageError,
    copy_out,
    prune,
    rfc3339,
    run,
    sha256_file,
    walk,
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
    names = list(walk(root)) if paths is None else list(paths)
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
    return sha256_file(dest), dest.stat().st_size


@dataclass
class Layout:
    """An OCI image layout that umoci writes, every timestamp given (so reproducible)."""

    path: Path
    epoch: int
    """The images' ``created`` and the archive's file times."""
    out: Progress

    @property
    def created(self) -> str:
        return rfc3339(self.epoch)

    def umoci(self, *args: str, label: str) -> None:
        run(["umoci", *args], out=self.out, label=f"umoci {label}")

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
        workingdir: str | None,
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

    def write_archive(self, archive: Path, names: dict[str, str]) -> None:
        """Drop unreferenced blobs, name the manifests (:func:`finish_index`) and write
        the layout as the tar ``archive``, staged beside the layout and then moved."""
        self.gc()
        finish_index(self.path, names)
        staging = self.path.parent / archive.name
        write_tar(staging, self.path, epoch=self.epoch)
        archive.parent.mkdir(parents=True, exist_ok=True)
        staging.replace(archive)


def finish_index(layout: Path, names: dict[str, str]) -> None:
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


def describe(
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


@dataclass(frozen=True)
class BuiltArchive:
    """An archive of images that a build made, or found in its cache."""

    archive: Path
    """The OCI image-layout tar holding every image."""
    images: dict[str, ImageInfo]
    """By the name containerd lists, e.g. ``docker.io/library/steward-informer:dev``."""
    layers: dict[str, Layer]
    """Every layer blob, by digest (a layer that images share is listed once)."""
    seconds: float
    """Time this call took (a cached result takes well under a second)."""
    cached: bool
    """True when the archive came from the cache, unchanged inputs."""
    key: str
    """Digest of the inputs."""

    def to_json(self) -> dict[str, Any]:
        """Every field as JSON data (the archive's path a string)."""
        data = asdict(self)
        data["archive"] = str(self.archive)
        return data

    @classmethod
    def made(
        cls,
        archive: Path,
        images: dict[str, ImageInfo],
        layers: dict[str, Layer],
        *,
        key: str,
        started: float,
        out: Progress,
        what: str,
        **fields: Any,
    ) -> Self:
        """A new build's result (begun at ``started``, a ``time.monotonic()``) for
        ``archive``, with the ``fields`` of its kind: kept beside the archive as
        ``built.json`` (written after it, so that one means the archive is whole) and
        said; of the builds beside its directory, the last three stay."""
        seconds = time.monotonic() - started
        built = cls(archive, images, layers, seconds, False, key, **fields)
        built._save(archive.parent / "built.json")
        out.say(f"{what}: {len(images)} images in {archive} ({seconds:.0f}s)")
        prune(archive.parent.parent, keep=3)
        return built

    def written_to(self, output: Path | None) -> Self:
        """This result with its archive copied to ``output`` (and named by it) when
        given; else this result."""
        if output is None:
            return self
        return replace(self, archive=copy_out(self.archive, output))

    def _save(self, path: Path) -> None:
        """Keep this result in ``path`` (a cache entry's ``built.json``), replaced whole."""
        staging = path.with_name(path.name + ".partial")
        staging.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")
        staging.replace(path)

    @classmethod
    def from_cache(cls, archive: Path, *, started: float, out: Progress, what: str) -> Self | None:
        """The result :meth:`made` kept beside ``archive``, marked cached, when both are
        there (and said); else None."""
        meta = archive.parent / "built.json"
        if not (meta.is_file() and archive.is_file()):
            return None
        seconds = time.monotonic() - started
        data = json.loads(meta.read_text())
        data["images"] = {
            name: ImageInfo(**{**info, "layers": tuple(info["layers"])})
            for name, info in data["images"].items()
        }
        data["layers"] = {digest: Layer(**layer) for digest, layer in data["layers"].items()}
        built = cls(**{**data, "archive": archive, "seconds": seconds, "cached": True})
        out.say(f"{what}: unchanged inputs, cached archive {archive}")
        return built
