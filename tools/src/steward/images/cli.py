"""The command line, ``python -m steward.images`` (``make images`` runs it)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from steward.cluster import binaries
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress
from steward.images.common import ImageError
from steward.images.containerd import import_into_containerd
from steward.images.e2e_images import E2E_IMAGES, BuiltE2E, build_e2e
from steward.images.layout import BuiltArchive
from steward.images.steward_images import DEFAULT_TAG, PAUSE_IMAGE, BuiltImages, build_images


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def report(built: BuiltArchive) -> str:
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
            "controller-daemonset,controller-horizontalpodautoscaling,"
            "controller-garbagecollector,controller-namespace}:TAG "
            "(and registry.k8s.io/pause:3.10.2 with --pause). "
            "Needs root, mmdebstrap and umoci. With --e2e, the images upstream's "
            "[sig-apps] Job, Deployment and ReplicaSet conformance specs run instead "
            f"({', '.join(E2E_IMAGES)}; needs umoci and busybox-static, and root and "
            "mmdebstrap while the agnhost tools and nginx trees are not cached). "
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
            "build the e2e test images (busybox, agnhost under two tags, nginx, pause) instead of "
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
        print(json.dumps(built.to_json(), indent=2, sort_keys=True))
    else:
        print(report(built))
    return 0
