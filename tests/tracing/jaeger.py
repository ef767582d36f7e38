"""What the tracing tests share: a cluster as ``make up`` runs it, and Jaeger's query API."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.progress import Progress


@contextmanager
def steward_cluster(name: str, state_dir: Path) -> Iterator[LocalCluster]:
    """A one-node cluster with Steward's services exporting their spans to its Jaeger."""
    cfg = ClusterConfig(name=name, state_dir=state_dir, nodes=1, die_with_parent=True, steward=True)
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    try:
        yield running
    finally:
        running.down(progress=Progress(quiet=True))


def query(cluster: LocalCluster, path: str, **params: str) -> Any:
    """GET ``path`` of the cluster's Jaeger query API, decoded."""
    url = f"{cluster.jaeger_query_url}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def tags(span: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger span's tags as a dict."""
    return {t["key"]: t["value"] for t in span.get("tags") or []}
