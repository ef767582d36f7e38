"""Steward's images: the informer, the manager, one per controller, and pause.

Each service image is the base layer (:mod:`steward.images.base`), the venvs' shared
layer and its venv's own layer (:mod:`steward.images.venvs`), configured as
``deploy/images/Dockerfile``'s runtime stage: user ``65532:65532``, working directory
``/tmp``, ``PATH=/opt/steward/venv/bin:/usr/bin:/bin``, ``PYTHONDONTWRITEBYTECODE=1``,
``PYTHONUNBUFFERED=1``, ``HOME=/tmp``, ``TMPDIR=/tmp``; the entry point in exec form.
Every file is owned by root and not writable by group or others (``/tmp`` alone is
``1777``); nothing in the image needs to be writable. The pause image is ``/pause``
alone, user ``65535:65535``.

Results are cached by a digest of the inputs (the recipe, the base, each layer's
requirements, the workspace members' pyproject files, readmes and sources, uv's version,
the tag, the epoch, the pause binary) in ``cache_root()/images/archives/<digest>/``: a
second call with nothing changed returns at once. A change rebuilds the venvs' layers:
the shared one (most of the time, mostly byte-compilation) and each venv's small own
layer; the base stays.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from steward.cluster import binaries
from steward.cluster.progress import Progress
from steward.images.base import SUITE, Base, ensure_base
from steward.images.common import (
    RECIPE_VERSION,
    ImageError,
    InputsDigest,
    copy_out,
    images_root,
    locked,
    prune,
    recipe_source,
    require_root,
    require_tools,
    run,
    source_date_epoch,
    walk,
)
from steward.images.layout import BuiltArchive, Layout, describe, write_tar
from steward.images.venvs import (
    CONTROLLERS,
    HATCHLING,
    SERVICES,
    VENV,
    LayerPlan,
    VenvPlans,
    build_wheels,
    conflicts,
    feed_plans,
    find_uv,
    install_layer,
    plan_venvs,
)

DEFAULT_TAG = "dev"

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


@dataclass(frozen=True)
class ImageSpec:
    """One service image: its name, the venv it runs from, what its Python runs."""

    service: str
    venv: str
    """The venv it runs (:data:`~steward.images.venvs.VENVS`' name): its own layer."""
    args: tuple[str, ...]
    """The entry point's arguments after the interpreter (``-m steward.informer``; a
    controller's: ``-m steward run <name>``, from the registry)."""

    @property
    def name(self) -> str:
        return f"steward-{self.service}"

    def ref(self, tag: str) -> str:
        """The name containerd lists (``steward-informer:dev`` normalised)."""
        return f"docker.io/library/{self.name}:{tag}"

    def entrypoint(self) -> list[str]:
        return [f"{VENV}/bin/python", *self.args]


IMAGES = (
    ImageSpec("informer", SERVICES.name, ("-m", "steward.informer")),
    ImageSpec("manager", SERVICES.name, ("-m", "steward.manager")),
    *(ImageSpec(f"controller-{c.name}", c.distribution, c.launch) for c in CONTROLLERS),
)


@dataclass(frozen=True)
class BuiltImages(BuiltArchive):
    """What :func:`build_images` made: its images by the name containerd lists, e.g.
    ``docker.io/library/steward-informer:dev``; the base layer and the venvs' shared layer
    are shared by the service images."""

    base_key: str
    base_packages: dict[str, str]
    """The base's Debian packages and their versions."""


def build_images(
    tag: str = DEFAULT_TAG,
    *,
    out: Progress,
    pause_binary: Path | None = None,
    output: Path | None = None,
    use_cache: bool = True,
    rebuild_base: bool = False,
    only: Collection[str] | None = None,
) -> BuiltImages:
    """Build Steward's images (and the pause image with ``pause_binary``) into one OCI
    image-layout archive; see the module's documentation. ``only``: just the service
    images of these names (``informer``, ``controller-job``, ...; an unknown one is an
    :class:`ImageError`), each byte for byte as in the whole set.

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
    uv = find_uv()
    wanted = selected(only)
    with locked(out):
        base = ensure_base(out=out, epoch=epoch, rebuild=rebuild_base)
        uv_version = run([uv, "--version"], out=out, label="uv").strip()
        planned = plan_venvs(uv, repo, out)
        plans = planned.layers(image.venv for image in wanted)
        key = _inputs_key(
            images=wanted,
            plans=plans,
            base=base,
            tag=tag,
            epoch=epoch,
            uv_version=uv_version,
            pause_binary=pause_binary,
        )
        archive = images_root() / "archives" / key[:20] / f"steward-images-{tag}.tar"
        built = None
        if use_cache:
            built = BuiltImages.from_cache(archive, started=started, out=out, what="images")
        if built is None:
            require_root("building the images")
            require_tools(("umoci",), out)
            out.say(
                f"images: building {len(wanted)} service images"
                + (" and the pause image" if pause_binary else "")
                + f" (tag {tag}) on base {base.key[:12]}"
            )
            built = _build(
                wanted=wanted,
                repo=repo,
                uv=uv,
                planned=planned,
                base=base,
                tag=tag,
                epoch=epoch,
                key=key,
                archive=archive,
                pause_binary=pause_binary,
                out=out,
                started=started,
            )
    return built.written_to(output)


def selected(only: Collection[str] | None) -> tuple[ImageSpec, ...]:
    """The images ``only`` names (all of them for None), in :data:`IMAGES`' order."""
    if only is None:
        return IMAGES
    known = {image.service for image in IMAGES}
    unknown = sorted(set(only) - known)
    if unknown:
        raise ImageError(f"no such image: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return tuple(image for image in IMAGES if image.service in only)


def _inputs_key(
    *,
    images: Sequence[ImageSpec],
    plans: Sequence[LayerPlan],
    base: Base,
    tag: str,
    epoch: int,
    uv_version: str,
    pause_binary: Path | None,
) -> str:
    inputs = InputsDigest()
    inputs.feed("recipe", recipe_source())
    settings = [RECIPE_VERSION, tag, epoch, uv_version, HATCHLING]
    inputs.feed("settings", json.dumps(settings).encode())
    inputs.feed("base", base.key.encode() + base.diff_id.encode())
    if len(images) != len(IMAGES):
        inputs.feed("images", json.dumps([image.service for image in images]).encode())
    feed_plans(inputs, plans)
    if pause_binary is not None:
        inputs.feed("pause", pause_binary.read_bytes())
    return inputs.hexdigest()


def _build(
    *,
    wanted: Sequence[ImageSpec],
    repo: Path,
    uv: str,
    planned: VenvPlans,
    base: Base,
    tag: str,
    epoch: int,
    key: str,
    archive: Path,
    pause_binary: Path | None,
    out: Progress,
    started: float,
) -> BuiltImages:
    unpacked: dict[str, tuple[int, str]] = {
        base.diff_id: (base.size, f"base: Debian {SUITE}, Python {base.python_version}")
    }
    with tempfile.TemporaryDirectory(prefix=".tmp-build-", dir=images_root()) as tmp_name:
        tmp = Path(tmp_name)
        wheels = tmp / "wheels"
        plans = planned.layers(image.venv for image in wanted)
        build_wheels(uv, repo, (m for p in plans for m in p.members), wheels, out)
        out.say(f"images: workspace wheels built ({time.monotonic() - started:.0f}s)")
        scratch = tmp / "root"
        scratch.mkdir()
        run(["tar", "-x", "-f", str(base.layer), "-C", str(scratch)], out=out, label="unpack base")
        venv_layers: dict[str, tuple[Path, str]] = {}
        entries: dict[str, dict[str, bool]] = {}
        for plan in plans:
            began = time.monotonic()
            skeleton = base.python_version if plan is planned.shared else None
            install_layer(uv, repo, scratch, plan, wheels, out, python_version=skeleton)
            entries[plan.name] = _opt(scratch)
            layer = tmp / f"venv-{plan.name}.tar"
            paths = list(entries[plan.name])
            diff_id, size = write_tar(layer, scratch, epoch=epoch, paths=paths)
            shutil.rmtree(scratch / "opt")
            what = plan.describe()
            unpacked[f"sha256:{diff_id}"] = (size, what)
            venv_layers[plan.name] = (layer, what)
            out.say(
                f"images: venv {plan.name} {size / 1e6:.1f} MB ({time.monotonic() - began:.0f}s)"
            )
        for venv in sorted({image.venv for image in wanted}):
            below: dict[str, bool] = {}
            for plan in planned.chain(venv):
                if clashes := conflicts(below, entries[plan.name]):
                    raise ImageError(
                        f"venv {venv}: layer {plan.name} would replace what a layer below "
                        "holds: " + ", ".join(clashes[:5]) + (" …" if len(clashes) > 5 else "")
                    )
                below.update(entries[plan.name])
        layout = Layout(tmp / "layout", epoch, out)
        layout.init()
        layout.new("base")
        layout.add_layer("base", base.layer, unpacked[base.diff_id][1])
        # umoci's tags of the images so far: base, then each layer above it on the last.
        tags: dict[tuple[str, ...], str] = {(): "base"}
        names: dict[str, str] = {}
        for image in wanted:
            chain = planned.chain(image.venv)
            for depth, plan in enumerate(chain):
                done = tuple(p.name for p in chain[: depth + 1])
                if done in tags:
                    continue
                last = depth == len(chain) - 1
                new_tag = image.service if last else f"stack-{len(tags)}"
                layout.add_layer(tags[done[:-1]], *venv_layers[plan.name], new_tag=new_tag)
                if not last:
                    tags[done] = new_tag
            layout.configure(
                image.service,
                user=USER,
                entrypoint=image.entrypoint(),
                env=ENV,
                workingdir=WORKDIR,
            )
            names[image.service] = image.ref(tag)
        for internal in tags.values():
            layout.remove(internal)
        if pause_binary is not None:
            add_pause(layout, pause_binary, tmp, epoch, unpacked)
            names["pause"] = PAUSE_IMAGE
        layout.write_archive(archive, names)
        images, layers = describe(layout.path, unpacked)
    return BuiltImages.made(
        archive,
        images,
        layers,
        key=key,
        started=started,
        out=out,
        what="images",
        base_key=base.key,
        base_packages=base.packages,
    )


def _opt(scratch: Path) -> dict[str, bool]:
    """What a venv's layer holds: ``opt`` and everything under it, in write order, each
    path → whether it is a directory."""
    found = {}
    for rel in ["opt", *(f"opt/{p}" for p in walk(scratch / "opt"))]:
        path = scratch / rel
        found[rel] = path.is_dir() and not path.is_symlink()
    return found


def add_pause(
    layout: Layout,
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
    layout.configure("pause", user=PAUSE_USER, entrypoint=["/pause"], env=(), workingdir=WORKDIR)


def build_pause_archive(pause_binary: Path, *, out: Progress, output: Path | None = None) -> Path:
    """An archive holding the pause image (:data:`PAUSE_IMAGE`) alone, for nodes that need
    their sandbox image without Steward's: cached by the binary's digest; needs umoci,
    but neither root nor mmdebstrap. Written to ``output`` too when given."""
    epoch = source_date_epoch()
    digest = hashlib.sha256(recipe_source())
    digest.update(f"\0{epoch}\0".encode())
    digest.update(pause_binary.read_bytes())
    key = digest.hexdigest()
    archive = images_root() / "pause" / key[:20] / "pause.tar"
    with locked(out):
        if not archive.is_file():
            require_tools(("umoci",), out)
            with tempfile.TemporaryDirectory(prefix=".tmp-pause-", dir=images_root()) as tmp_name:
                tmp = Path(tmp_name)
                layout = Layout(tmp / "layout", epoch, out)
                layout.init()
                add_pause(layout, pause_binary, tmp, epoch, {})
                layout.write_archive(archive, {"pause": PAUSE_IMAGE})
            prune(archive.parent.parent, keep=3)
            out.say(f"images: {PAUSE_IMAGE} in {archive}")
    return archive if output is None else copy_out(archive, output)
