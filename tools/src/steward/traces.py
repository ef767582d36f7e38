"""``steward trace``: find an object's traces in Jaeger and print the one that tells its story.

Traces are found through the informer's event spans, which carry the object's namespace,
name, UID and resource (``k8s.namespace.name``, ``steward.object.name``, ``steward.object.uid``,
``steward.resource``) and the event's type (``steward.event.type``), using Jaeger's HTTP query
API (``/api/traces``). The trace shown by default is the object's *cause*
(:func:`select_story`): the one holding the informer's ``ADDED`` event of the object —
whatever wrote the object, the reconciles it caused, their API writes and, through the
``traceparent`` annotation, the events of the objects they created. Every other trace of
the object is listed one line each (:func:`listing`). The waterfall shows every span of a
trace — from the informer, the controllers, and kube-apiserver and etcd when they joined —
with its service, name, offset, duration and a bar, then the trace's link in Jaeger's UI.

# Errors
Jaeger unreachable or answering an error, and no trace found, raise :class:`TraceError`
with a message saying what was asked of which Jaeger. When no trace holds the object's
``ADDED`` event (it was listed, not watched, by the informer, or Jaeger has dropped that
trace), the earliest trace of the object stands in and :attr:`Story.note` says so.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

INFORMER_SERVICE = "steward-informer"

Trace = dict[str, Any]
"""One trace as Jaeger's query API returns it (``traceID``, ``spans``, ``processes``)."""


class TraceError(Exception):
    """Jaeger could not be asked, or had no trace of the object."""


@dataclass(frozen=True)
class ObjectRef:
    """The object traces are asked about.

    ``resource`` is matched as a prefix of the event spans' ``steward.resource`` (``job``
    matches ``jobs.v1.batch``) and an empty one matches any; an empty ``namespace``
    matches any.
    """

    resource: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.resource}/{self.name}"


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


def _get(url: str, *, missing_ok: bool = False) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - user's Jaeger
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        if missing_ok and err.code == 404:
            return None
        raise TraceError(f"cannot query Jaeger at {url}: {err}") from err
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise TraceError(f"cannot query Jaeger at {url}: {err}") from err


def find_traces(
    jaeger: str,
    resource: str,
    namespace: str,
    name: str,
    *,
    limit: int = 20,
    event_type: str = "",
) -> list[Trace]:
    """Traces whose informer event spans are about this object, newest first.

    ``resource`` is matched as a prefix of the spans' ``steward.resource`` (``job`` matches
    ``jobs.v1.batch``); empty matches any. ``event_type`` (``ADDED``, ``MODIFIED``, …)
    keeps only traces with an event span of that type. Jaeger answers with the ``limit``
    traces it received last.
    """
    tags = {"steward.object.name": name}
    if namespace:
        tags["k8s.namespace.name"] = namespace
    if event_type:
        tags["steward.event.type"] = event_type
    query = urllib.parse.urlencode(
        {
            "service": INFORMER_SERVICE,
            "tags": json.dumps(tags),
            "limit": str(limit),
            "lookback": "2h",
        }
    )
    answer = _get(f"{jaeger.rstrip('/')}/api/traces?{query}")
    traces: list[Trace] = [t for t in answer.get("data") or [] if t.get("spans")]
    if resource:
        wanted = resource.lower()
        traces = [t for t in traces if any(_resource_of(s).startswith(wanted) for s in t["spans"])]
    traces.sort(key=trace_start, reverse=True)
    return traces


def get_trace(jaeger: str, trace_id: str) -> Trace | None:
    """The trace of this ID, or None when Jaeger has none."""
    answer = _get(
        f"{jaeger.rstrip('/')}/api/traces/{urllib.parse.quote(trace_id)}", missing_ok=True
    )
    found = [t for t in (answer or {}).get("data") or [] if t.get("spans")]
    return found[0] if found else None


def _resource_of(span: dict[str, Any]) -> str:
    return str(_tags(span).get("steward.resource", ""))


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t.get("key"): t.get("value") for t in span.get("tags") or []}


def trace_start(trace: Trace) -> int:
    """When the trace's first span started (µs since the epoch)."""
    return min(int(s["startTime"]) for s in trace["spans"])


def event_spans(trace: Trace, obj: ObjectRef) -> list[dict[str, Any]]:
    """The informer's event spans of ``trace`` about ``obj``, by start."""
    wanted = obj.resource.lower()
    found = []
    for span in trace.get("spans") or []:
        tags = _tags(span)
        if (
            "steward.event.type" in tags
            and tags.get("steward.object.name") == obj.name
            and (not obj.namespace or tags.get("k8s.namespace.name") == obj.namespace)
            and str(tags.get("steward.resource", "")).startswith(wanted)
        ):
            found.append(span)
    return sorted(found, key=lambda s: int(s["startTime"]))


def concerns(trace: Trace, obj: ObjectRef) -> bool:
    """Whether ``trace`` holds an informer event of ``obj``."""
    return bool(event_spans(trace, obj))


def _first_event(trace: Trace, obj: ObjectRef) -> int:
    return int(event_spans(trace, obj)[0]["startTime"])


@dataclass(frozen=True)
class Story:
    """What ``steward trace`` shows of an object by default: the trace of its cause, and
    its other traces (each list in the order of the object's first event in them)."""

    cause: Trace
    note: str = ""
    """Empty when ``cause`` holds the object's ``ADDED`` event; else why it stands in."""
    earlier: list[Trace] = field(default_factory=list)
    """Traces of the object before its cause: an earlier object of the same name."""
    later: list[Trace] = field(default_factory=list)


def select_story(traces: list[Trace], obj: ObjectRef) -> Story | None:
    """The object's cause among ``traces``, and the rest before and after it.

    The cause is the trace holding the informer's ``ADDED`` event of the object (a watch
    event, or one a relist found). When the name was used by several objects, the newest
    one's (by its UID) counts; should the informer have seen that object added more than
    once, the first. Without any ``ADDED`` event the earliest trace of the object stands
    in, and :attr:`Story.note` says so. Traces not about the object are left out; None
    when none is.
    """
    mine = {t["traceID"]: t for t in traces if concerns(t, obj)}
    if not mine:
        return None
    added = [
        (int(span["startTime"]), str(_tags(span).get("steward.object.uid", "")), trace)
        for trace in mine.values()
        for span in event_spans(trace, obj)
        if str(_tags(span).get("steward.event.type", "")).split(" ")[0] == "ADDED"
    ]
    note = ""
    if added:
        newest_uid = max(added, key=lambda a: a[0])[1]
        since, _, cause = min((a for a in added if a[1] == newest_uid), key=lambda a: a[0])
    else:
        cause = min(mine.values(), key=lambda t: _first_event(t, obj))
        since = _first_event(cause, obj)
        note = (
            f"no trace holds the ADDED event of {obj} (the informer found it in a first "
            "LIST rather than watched it arrive, or Jaeger no longer has that trace); "
            f"showing the earliest of its {len(mine)} traces"
        )
    others = sorted(
        (t for t in mine.values() if t["traceID"] != cause["traceID"]),
        key=lambda t: _first_event(t, obj),
    )
    return Story(
        cause=cause,
        note=note,
        earlier=[t for t in others if _first_event(t, obj) < since],
        later=[t for t in others if _first_event(t, obj) >= since],
    )


@dataclass(frozen=True)
class Summary:
    """One trace in a line: when it started, its size, its services and its outcome."""

    trace_id: str
    start_us: int
    spans: int
    services: tuple[str, ...]
    outcome: str
    """``ok``, with the reconciles' results other than ``success`` in parentheses; or
    ``error:`` and the first span with an error status (and how many more there are)."""


def summarize(trace: Trace) -> Summary:
    """The :class:`Summary` of a Jaeger trace."""
    spans = spans_of(trace)
    errors = sorted((s for s in spans if s.error), key=lambda s: s.start_us)
    if errors:
        first = errors[0]
        outcome = f"error: {first.service}: {first.name}"
        if len(errors) > 1:
            outcome += f" (+{len(errors) - 1} more)"
    else:
        results: list[str] = []
        for raw in sorted(trace["spans"], key=lambda s: int(s["startTime"])):
            result = _tags(raw).get("steward.result")
            if result and result != "success" and result not in results:
                results.append(str(result))
        outcome = f"ok ({', '.join(results)})" if results else "ok"
    return Summary(
        trace_id=str(trace["traceID"]),
        start_us=trace_start(trace),
        spans=len(spans),
        services=tuple(sorted({s.service for s in spans})),
        outcome=outcome,
    )


def timestamp(us: int) -> str:
    """µs since the epoch as UTC, to the millisecond: ``2026-12-04T20:15:03.123Z``."""
    seconds, rest = divmod(us, 1_000_000)
    when = datetime.fromtimestamp(seconds, UTC)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{rest // 1000:03d}Z"


def listing(traces: list[Trace]) -> list[str]:
    """One aligned line per trace: start, trace ID, spans, services, outcome."""
    rows = [summarize(t) for t in traces]
    if not rows:
        return []
    count_width = max(len(str(r.spans)) for r in rows)
    services_width = max(len(", ".join(r.services)) for r in rows)
    return [
        f"{timestamp(r.start_us)}  {r.trace_id}  {r.spans:>{count_width}} "
        f"{'span ' if r.spans == 1 else 'spans'}  "
        f"{', '.join(r.services):{services_width}}  {r.outcome}"
        for r in rows
    ]


def spans_of(trace: Trace) -> list[Span]:
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


def render(jaeger: str, trace: Trace) -> str:
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


def render_story(jaeger: str, story: Story, *, more: str = "", truncated: str = "") -> str:
    """The cause's waterfall (:func:`render`), then the earlier traces (if any) and the
    later ones, a line each. ``more`` ends the later traces' heading (e.g. how to print
    one of them); ``truncated`` says that Jaeger was asked for fewer traces than it may
    hold, and is printed even when none of those it sent is a later one."""
    parts = [render(jaeger, story.cause)]
    if story.earlier:
        parts.append(
            "\n".join(
                [
                    f"earlier traces, of an earlier object of that name ({len(story.earlier)}):",
                    *(f"  {line}" for line in listing(story.earlier)),
                ]
            )
        )
    if story.later:
        notes = "".join(f"; {n}" for n in (more, truncated) if n)
        heading = f"later traces ({len(story.later)}{notes}):"
        parts.append("\n".join([heading, *(f"  {line}" for line in listing(story.later))]))
    else:
        parts.append("later traces: none" + (f" ({truncated})" if truncated else ""))
    return "\n\n".join(parts)
