"""What the tracing tests share: a cluster as ``make up`` runs it, and Jaeger's query API."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.progress import Progress


@contextmanager
def steward_cluster(name: str, state_dir: Path) -> Iterator[LocalCluster]:
    """A one-node cluster with Steward's services exporting their spans to its Jaeger, and
    the metrics pipeline (as ``make up`` runs them)."""
    cfg = ClusterConfig(
        name=name,
        state_dir=state_dir,
        nodes=1,
        die_with_parent=True,
        steward=True,
        metrics=True,
    )
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


def wait_for_story(
    cluster: LocalCluster,
    resource: str,
    name: str,
    missing_from: Callable[[dict[str, Any]], str],
    what: str,
    timeout: float = 90.0,
) -> dict[str, Any]:
    """Poll Jaeger until one of the informer's traces of object ``name`` of ``resource``
    (e.g. ``jobs.v1.batch``) tells the whole story: ``missing_from(trace)`` says what a
    trace lacks, empty when nothing. Each service exports its spans in batches of its
    own, so a story fills in over a few seconds. Returns that trace; fails saying what
    the last one lacked."""
    wanted = json.dumps({"steward.object.name": name, "steward.resource": resource})
    deadline = time.monotonic() + timeout
    missing = "no trace yet"
    while time.monotonic() < deadline:
        found = query(
            cluster,
            "/api/traces",
            service="steward-informer",
            tags=wanted,
            lookback="1h",
            limit="50",
        )["data"]
        for trace in found or []:
            missing = missing_from(trace)
            if not missing:
                return dict(trace)
        time.sleep(1)
    pytest.fail(f"no trace tells {what}: {missing}")


def tags(span: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger span's tags as a dict."""
    return {t["key"]: t["value"] for t in span.get("tags") or []}


class Tree:
    """One Jaeger trace as a tree of spans, for checking a story piece by piece."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.spans: dict[str, dict[str, Any]] = {s["spanID"]: s for s in trace["spans"]}
        self._service: dict[str, str] = {
            s["spanID"]: trace["processes"][s["processID"]]["serviceName"]
            for s in self.spans.values()
        }

    def service(self, span: dict[str, Any]) -> str:
        return self._service[span["spanID"]]

    def parent(self, span: dict[str, Any]) -> dict[str, Any] | None:
        for ref in span.get("references") or []:
            if ref["refType"] == "CHILD_OF" and ref["spanID"] in self.spans:
                return self.spans[ref["spanID"]]
        return None

    def ancestors(self, span: dict[str, Any]) -> list[dict[str, Any]]:
        chain = []
        current = self.parent(span)
        while current is not None:
            chain.append(current)
            current = self.parent(current)
        return chain

    def find(self, operation: str, *, under: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Spans named ``operation``, only those below ``under`` when given."""
        return [
            s
            for s in self.spans.values()
            if s["operationName"] == operation and (under is None or under in self.ancestors(s))
        ]

    def below(self, span: dict[str, Any]) -> list[dict[str, Any]]:
        return [s for s in self.spans.values() if span in self.ancestors(s)]
