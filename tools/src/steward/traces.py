"""``steward trace``: find an object's latest traces in Jaeger and print them as a waterfall.

Traces are found through the informer's event spans, which carry the object's namespace,
name and resource (``k8s.namespace.name``, ``k8s.object.name``, ``k8s.resource``), using
Jaeger's HTTP query API (``/api/traces``). The waterfall shows every span of the trace —
from the informer, the controllers, and kube-apiserver and etcd when they joined — with
its service, name, offset, duration and a bar, then the trace's link in Jaeger's UI.

# Errors
Jaeger unreachable or answering an error, and no trace found, raise :class:`TraceError`
with a message saying what was asked of which Jaeger.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

INFORMER_SERVICE = "steward-informer"


class TraceError(Exception):
    """Jaeger could not be asked, or had no trace of the object."""


@dataclass(frozen=True)
class Span:
    """One span of a trace, as the waterfall needs it."""

    span_id: str
    parent_id: str
    service: str
    name: str
    start_us: int
    duration_us: int
    error: bool


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - user's Jaeger
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise TraceError(f"cannot query Jaeger at {url}: {err}") from err


def find_traces(
    jaeger: str, resource: str, namespace: str, name: str, *, limit: int = 20
) -> list[dict[str, Any]]:
    """Traces whose informer event spans are about this object, newest first.

    ``resource`` is matched as a prefix of the spans' ``k8s.resource`` (``job`` matches
    ``jobs.v1.batch``); empty matches any.
    """
    tags = {"k8s.object.name": name}
    if namespace:
        tags["k8s.namespace.name"] = namespace
    query = urllib.parse.urlencode(
        {
            "service": INFORMER_SERVICE,
            "tags": json.dumps(tags),
            "limit": str(limit),
            "lookback": "2h",
        }
    )
    answer = _get(f"{jaeger.rstrip('/')}/api/traces?{query}")
    traces: list[dict[str, Any]] = [t for t in answer.get("data") or [] if t.get("spans")]
    if resource:
        wanted = resource.lower()
        traces = [t for t in traces if any(_resource_of(s).startswith(wanted) for s in t["spans"])]
    traces.sort(key=lambda t: min(s["startTime"] for s in t["spans"]), reverse=True)
    return traces


def _resource_of(span: dict[str, Any]) -> str:
    for tag in span.get("tags") or []:
        if tag.get("key") == "k8s.resource":
            return str(tag.get("value", ""))
    return ""


def spans_of(trace: dict[str, Any]) -> list[Span]:
    """The spans of a Jaeger trace (JSON as the query API returns it)."""
    processes = trace.get("processes") or {}
    spans = []
    for raw in trace["spans"]:
        parent = ""
        for ref in raw.get("references") or []:
            if ref.get("refType") == "CHILD_OF":
                parent = ref.get("spanID", "")
                break
        service = processes.get(raw.get("processID"), {}).get("serviceName", "?")
        error = any(
            t.get("key") in ("error", "otel.status_code") and t.get("value") in (True, "ERROR")
            for t in raw.get("tags") or []
        )
        spans.append(
            Span(
                raw["spanID"],
                parent,
                service,
                raw.get("operationName", ""),
                int(raw["startTime"]),
                int(raw.get("duration", 0)),
                error,
            )
        )
    return spans


def waterfall(spans: list[Span], width: int = 40) -> list[str]:
    """Lines of a waterfall: spans in tree order (children after parents, by start)."""
    if not spans:
        return []
    by_id = {s.span_id: s for s in spans}
    children: dict[str, list[Span]] = {}
    roots = []
    for span in spans:
        if span.parent_id and span.parent_id in by_id:
            children.setdefault(span.parent_id, []).append(span)
        else:
            roots.append(span)
    start = min(s.start_us for s in spans)
    end = max(s.start_us + s.duration_us for s in spans)
    total = max(end - start, 1)
    ordered: list[tuple[int, Span]] = []

    def visit(span: Span, depth: int) -> None:
        ordered.append((depth, span))
        for child in sorted(children.get(span.span_id, []), key=lambda s: s.start_us):
            visit(child, depth + 1)

    for root in sorted(roots, key=lambda s: s.start_us):
        visit(root, 0)
    label_width = min(60, max(2 * d + len(s.service) + len(s.name) + 3 for d, s in ordered))
    lines = []
    for depth, span in ordered:
        label = f"{'  ' * depth}{span.service}: {span.name}"[:label_width]
        offset = int((span.start_us - start) / total * width)
        length = max(1, int(span.duration_us / total * width))
        bar = " " * offset + ("!" if span.error else "█") * min(length, width - offset)
        lines.append(
            f"{label:{label_width}}  {(span.start_us - start) / 1000:8.1f} ms "
            f"{span.duration_us / 1000:8.1f} ms  |{bar:{width}}|"
        )
    return lines


def render(jaeger: str, trace: dict[str, Any]) -> str:
    """The waterfall of one trace with a header and its Jaeger link."""
    spans = spans_of(trace)
    services = sorted({s.service for s in spans})
    header = (
        f"trace {trace['traceID']}: {len(spans)} spans from {len(services)} services "
        f"({', '.join(services)})"
    )
    return "\n".join(
        [
            header,
            *waterfall(spans),
            f"Jaeger: {jaeger.rstrip('/')}/trace/{trace['traceID']}",
        ]
    )
