"""The root CA certificate publisher: the ConfigMap ``kube-root-ca.crt`` (key ``ca.crt``:
the API server's CA bundle) in every namespace, as upstream's
``root-ca-certificate-publisher-controller``
(pkg/controller/certificates/rootcacertpublisher/publisher.go).

# The bundle
Read once at start from ``--root-ca-file`` (which must hold PEM certificates, else the
controller does not start); without the flag, the CA the controller's own client trusts:
its kubeconfig's certificate authority, or in a pod the service account's ``ca.crt``
(upstream falls back to the CA data of its own kubeconfig the same way). A client without
a CA of its own publishes an empty bundle, as upstream's.

# A sync
Keyed by namespace; the namespace itself is not read. Where the mirror holds no
``kube-root-ca.crt``, one is created (the bundle and the ``kubernetes.io/description``
annotation); a create refused because the namespace is gone or being deleted (a
``NamespaceTerminating`` cause) is no failure, any other refusal (``AlreadyExists``
included) fails the sync. Where one exists, it is written back (PUT, conditional on its
resourceVersion) unless its data is exactly ``{ca.crt: bundle}`` and the description
annotation is not empty: the data replaced, the annotation set, the rest kept. A failed
sync is retried with backoff. Each sync is counted in
``root_ca_cert_publisher_sync_total`` and ``root_ca_cert_publisher_sync_duration_seconds``
by ``code`` (200, the API server's refusal status, or 500), upstream's metrics.

# Queueing
A namespace is queued when it is added, when it changes while ``Active``, and when its
``kube-root-ca.crt`` changes or is deleted (upstream's handlers; the ConfigMap's own
creation queues nothing). Every namespace is queued again every 12 hours (the resync of
kube-controller-manager's informers, ``--min-resync-period``).

# What it reads
Namespaces: metadata and ``status.phase``. ConfigMaps: only those named
``kube-root-ca.crt`` (a field selector), whole, since an update writes one back whole.
Both from the informer.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from prometheus_client import Counter, Histogram

import steward
from steward import CONFIGMAPS, NAMESPACES, ApiError, Request, Result
from steward.controllers.rootcacertpublisher.publication import (
    CONFIGMAP_NAME,
    check_bundle,
    configmap,
    create_ignored,
    sync_code,
    updated,
)
from steward.kube import SERVICE_ACCOUNT_DIR, KubeClient
from steward.runtime.mirror import StaleRead

log = logging.getLogger(__name__)

NAME = "root-ca-cert-publisher"
"""The controller's name with the manager (kube-controller-manager's --controllers alias of
its root-ca-certificate-publisher-controller)."""
QUEUE = "root_ca_cert_publisher"
"""The work queue's name (its ``workqueue_*{name=...}`` metrics), upstream's."""
WORKERS = 1
"""Namespaces synced at once: kube-controller-manager runs the publisher with one worker
and no flag to change it."""
RESYNC_PERIOD = 12 * 3600.0
"""Seconds between two resyncs: kube-controller-manager's informers resync every
``--min-resync-period`` (12 h) to twice that."""
IN_CLUSTER_CA = Path(SERVICE_ACCOUNT_DIR) / "ca.crt"
"""The CA bundle the kubelet mounts in a pod."""

SYNCS = Counter(
    "root_ca_cert_publisher_sync_total",
    "Number of namespace syncs happened in root ca cert publisher.",
    ["code"],
)
SYNC_SECONDS = Histogram(
    "root_ca_cert_publisher_sync_duration_seconds",
    "Number of namespace syncs happened in root ca cert publisher.",
    ["code"],
    buckets=[0.001 * 2**i for i in range(15)],
)
"""Upstream's two metrics, with its help texts and buckets (1 ms doubling, 15 of them)."""


def read_bundle(path: str) -> str:
    """The ``--root-ca-file`` flag's value: the file's PEM text, checked.

    Raises:
        argparse.ArgumentTypeError: unreadable, or no valid certificate in it.
    """
    try:
        text = Path(path).read_text()
        check_bundle(text, path)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return text


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The publisher's flag, named as kube-controller-manager's."""
    parser.add_argument(
        "--root-ca-file",
        type=read_bundle,
        default=None,
        metavar="FILE",
        help=(
            "the PEM CA bundle published as kube-root-ca.crt in every namespace (default: "
            "the CA of the controller's own kubeconfig, or in a pod the service account's "
            "ca.crt)"
        ),
    )


def default_bundle(api: KubeClient) -> str:
    """The bundle without ``--root-ca-file``: the CA file the client trusts (a kubeconfig's
    inline data is written to one by the loader), else the in-cluster one, else empty."""
    for candidate in (api.access.ca_file, IN_CLUSTER_CA):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_text()
    log.warning("no CA bundle to publish: the client trusts no CA file of its own")
    return ""


def namespace_changed(change: steward.Change) -> bool:
    """Upstream's namespace handlers: every addition, updates only while ``Active``, never
    a deletion."""
    if change.kind is steward.ChangeKind.ADDED:
        return True
    if change.kind is steward.ChangeKind.DELETED:
        return False
    return (change.obj.object.get("status") or {}).get("phase") == "Active"


class Publisher:
    """Publishes the bundle in one namespace; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.configmaps = ctx.client(CONFIGMAPS)
        bundle = ctx.flags.root_ca_file
        self.ca: str = bundle if bundle is not None else default_bundle(ctx.api)

    def configmap_changed(self, change: steward.Change) -> list[Request]:
        """Upstream's ConfigMap handlers: an update or a deletion of ``kube-root-ca.crt``
        queues its namespace (the subscription sends no other ConfigMap)."""
        if change.kind is steward.ChangeKind.ADDED or change.obj.name != CONFIGMAP_NAME:
            return []
        return [Request("", change.obj.namespace)]

    async def reconcile(self, request: Request) -> Result:
        """Sync one namespace, counted in the metrics (see the module docs)."""
        started = time.monotonic()
        try:
            await self.sync(request.name)
        except StaleRead:
            raise  # no sync: the runtime queues the key again once the mirror is current
        except Exception as err:
            _record(request.name, started, err)
            raise
        _record(request.name, started, None)
        return Result()

    async def sync(self, namespace: str) -> None:
        """Create or correct ``kube-root-ca.crt`` in ``namespace``.

        Raises:
            ApiError: a write failed (other than upstream lets pass).
        """
        found = self.mirror.get(CONFIGMAPS, namespace, CONFIGMAP_NAME)
        if found is None:
            try:
                await self.configmaps.create(configmap(self.ca), namespace=namespace)
            except ApiError as err:
                if create_ignored(err):
                    log.debug("namespace %s: %s not created: %s", namespace, CONFIGMAP_NAME, err)
                    return
                raise
            log.info("namespace %s: created %s", namespace, CONFIGMAP_NAME)
            return
        body = updated(found.object, self.ca)
        if body is None:
            return
        await self.configmaps.update(body)
        log.info("namespace %s: updated %s", namespace, CONFIGMAP_NAME)


def _record(namespace: str, started: float, failure: Exception | None) -> None:
    elapsed = time.monotonic() - started
    code = sync_code(failure)
    SYNCS.labels(code).inc()
    SYNC_SECONDS.labels(code).observe(elapsed)
    log.debug("finished syncing namespace %s in %.3fs", namespace, elapsed)


CONTROLLER = (
    steward.ControllerBuilder[Publisher](NAME)
    .for_(NAMESPACES, namespace_changed, metadata_only=True, fields=["status.phase"])
    .watches_changes(
        CONFIGMAPS, Publisher.configmap_changed, field_selector=f"metadata.name={CONFIGMAP_NAME}"
    )
    .flags(add_flags)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=WORKERS, resync_period=RESYNC_PERIOD, queue_name=QUEUE
        )
    )
    .beside_upstream(None)
    .describe(
        "Steward's root CA certificate publisher: the ConfigMap kube-root-ca.crt (ca.crt: "
        "the --root-ca-file bundle, else the CA of the controller's own kubeconfig) in "
        "every namespace, created, corrected and restored, as kube-controller-manager's "
        "root-ca-cert-publisher. --workers defaults to 1, as upstream runs it. Both would "
        "write the same ConfigMaps, so it must not run beside upstream's."
    )
    .complete(Publisher)
)
"""The publisher: namespaces are the primary type; ConfigMaps named kube-root-ca.crt are
watched and read."""
