"""Steward's container images, built without a daemon or registry (``make images``).

``build_images()`` writes one OCI image-layout archive (a tar) that holds every image of
Steward, with their blobs shared, for a node's containerd to import with
``ctr -n k8s.io images import <archive>`` (:func:`import_into_containerd`):

=================================================  ===============================================
image (as containerd lists it)                     entry point
=================================================  ===============================================
docker.io/library/steward-informer:TAG             python -m steward.informer
docker.io/library/steward-manager:TAG              python -m steward.manager
…/steward-controller-job:TAG                       python -m steward run job
…/steward-controller-replicaset:TAG                python -m steward run replicaset
…/steward-controller-deployment:TAG                python -m steward run deployment
…/steward-controller-endpoint:TAG                  python -m steward run endpoint
…/steward-controller-endpointslice:TAG             python -m steward run endpointslice
…/steward-controller-daemonset:TAG                 python -m steward run daemonset
…/steward-controller-horizontalpodautoscaling:TAG  python -m steward run horizontalpodautoscaling
…/steward-controller-garbagecollector:TAG          python -m steward run garbagecollector
…/steward-controller-namespace:TAG                 python -m steward run namespace
registry.k8s.io/pause:3.10.2                       /pause (only with ``pause_binary``)
=================================================  ===============================================

:func:`build_pause_archive` writes an archive of the pause image alone (no root needed);
:func:`build_e2e_archive` (``python -m steward.images --e2e``) an archive of the images
upstream's e2e specs run, under the names e2e expects (:data:`E2E_IMAGES`), and
:func:`build_consumer_archive` one of the resource consumer the ``[sig-autoscaling]``
specs load their pods with (:data:`RESOURCE_CONSUMER_IMAGE`).

The images follow ``deploy/images/Dockerfile``'s targets, built another way, one module
a part (each one's documentation says how):

- :mod:`~steward.images.base`: the base layer, Debian's ``python3.11`` from
  ``mmdebstrap``, stripped and cached once per machine;
- :mod:`~steward.images.venvs`: the virtual environment in layers, one that every
  service image shares (steward and the third-party packages) and one of each venv's own
  (a controller's distribution; the services'), installed with uv and byte-compiled by
  the base's interpreter;
- :mod:`~steward.images.layout`: deterministic layer tars and umoci's OCI layouts;
- :mod:`~steward.images.steward_images`: the service images' configuration, the pause
  image and the cached archive;
- :mod:`~steward.images.e2e_images`: busybox, agnhost, nginx and pause for the e2e specs;
- :mod:`~steward.images.containerd`: importing an archive into a containerd;
- :mod:`~steward.images.cli`: the command line;
- :mod:`~steward.images.common`: what they share (the error, the epoch, the cache).

Building twice from the same inputs gives the same manifest digests and the same
archive. Building Steward's images needs root (mmdebstrap's root mode, chroot),
mmdebstrap and umoci (Debian packages), and uv (``make venv``).

``python -m steward.images --help`` is the command line (``make images`` runs it).
"""

from __future__ import annotations

from steward.images.base import Base, base_key, ensure_base
from steward.images.cli import build_parser, main, report
from steward.images.common import DEFAULT_EPOCH, RECIPE_VERSION, ImageError, source_date_epoch
from steward.images.containerd import archive_names, import_into_containerd
from steward.images.e2e_images import (
    AGNHOST_IMAGE,
    AGNHOST_PREVIOUS_IMAGE,
    BUSYBOX_BINARY,
    BUSYBOX_IMAGE,
    CONSUMER_IMAGES,
    E2E_IMAGES,
    E2E_RECIPE_VERSION,
    NGINX_IMAGE,
    RESOURCE_CONSUMER_IMAGE,
    BuiltConsumer,
    BuiltE2E,
    build_consumer,
    build_consumer_archive,
    build_e2e,
    build_e2e_archive,
    porter_files,
)
from steward.images.layout import BuiltArchive, ImageInfo, Layer, write_tar
from steward.images.steward_images import (
    DEFAULT_TAG,
    ENV,
    IMAGES,
    PAUSE_IMAGE,
    BuiltImages,
    ImageSpec,
    build_images,
    build_pause_archive,
)
from steward.images.venvs import VENVS, Venv

__all__ = [
    "AGNHOST_IMAGE",
    "AGNHOST_PREVIOUS_IMAGE",
    "BUSYBOX_BINARY",
    "BUSYBOX_IMAGE",
    "CONSUMER_IMAGES",
    "DEFAULT_EPOCH",
    "DEFAULT_TAG",
    "E2E_IMAGES",
    "E2E_RECIPE_VERSION",
    "ENV",
    "IMAGES",
    "NGINX_IMAGE",
    "PAUSE_IMAGE",
    "RECIPE_VERSION",
    "RESOURCE_CONSUMER_IMAGE",
    "VENVS",
    "Base",
    "BuiltArchive",
    "BuiltConsumer",
    "BuiltE2E",
    "BuiltImages",
    "ImageError",
    "ImageInfo",
    "ImageSpec",
    "Layer",
    "Venv",
    "archive_names",
    "base_key",
    "build_consumer",
    "build_consumer_archive",
    "build_e2e",
    "build_e2e_archive",
    "build_images",
    "build_parser",
    "build_pause_archive",
    "ensure_base",
    "import_into_containerd",
    "main",
    "porter_files",
    "report",
    "source_date_epoch",
    "write_tar",
]
