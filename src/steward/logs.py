"""The processes' logs: ``--logging-format=text|json`` and ``-v``, as Kubernetes'
components take them (``--logging-format``, klog's ``-v``).

- ``text`` (the default): ``<time> <LEVEL> <logger>: <message>``, and in a reconcile
  `` controller=<name> key=<namespace/name>``.
- ``json``: one JSON object a line with ``ts`` (Unix seconds, as klog's JSON), ``level``,
  ``logger``, ``msg``, the ``component`` (``steward-<name>``), and when known the
  ``controller`` and ``key`` of the reconcile the line was logged in and the OpenTelemetry
  ``trace_id`` and ``span_id`` of its span (so a line leads to its trace in Jaeger), and
  ``err`` with the exception's traceback.

``-v`` / ``--v`` sets the verbosity as klog's: below :data:`DEBUG_FROM` the logs are at
INFO and above; from it, DEBUG too. ``$STEWARD_LOGGING_FORMAT`` and ``$STEWARD_V`` give the
defaults (a Deployment's env), the flags win.

The worker that runs a reconcile sets :data:`CONTROLLER` and :data:`KEY` (context variables:
each reconcile runs in a task of its own), so every line logged under it carries them
without the controller passing them along.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import logging
import os
import sys
from typing import Any

from opentelemetry import trace

FORMATS = ("text", "json")
FORMAT_ENV = "STEWARD_LOGGING_FORMAT"
VERBOSITY_ENV = "STEWARD_V"
DEBUG_FROM = 4
"""The ``-v`` from which DEBUG lines are written (klog's convention: V(4) is debug)."""

CONTROLLER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "steward_log_controller", default=None
)
"""The controller whose reconcile is running in this context."""
KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("steward_log_key", default=None)
"""The key (``namespace/name``) of the reconcile running in this context."""

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_logging_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--logging-format`` and ``-v``/``--v``, their defaults from the environment."""
    default_format = os.environ.get(FORMAT_ENV) or "text"
    parser.add_argument(
        "--logging-format",
        choices=FORMATS,
        default=default_format if default_format in FORMATS else "text",
        help=f"log lines as text or JSON objects (default: ${FORMAT_ENV}, or %(default)s)",
    )
    parser.add_argument(
        "-v",
        "--v",
        dest="verbosity",
        type=int,
        default=_int_env(VERBOSITY_ENV),
        metavar="N",
        help=f"log verbosity as klog's; {DEBUG_FROM} and above add DEBUG lines "
        f"(default: ${VERBOSITY_ENV}, or 0)",
    )


def _int_env(name: str) -> int:
    try:
        return int(os.environ.get(name) or 0)
    except ValueError:
        return 0


class _Context(logging.Filter):
    """Adds the reconcile's controller and key and the current span's IDs to a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.controller = CONTROLLER.get()
        record.key = KEY.get()
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = f"{ctx.trace_id:032x}" if ctx.is_valid else None
        record.span_id = f"{ctx.span_id:016x}" if ctx.is_valid else None
        return True


class TextFormatter(logging.Formatter):
    """:data:`TEXT`, with `` controller=... key=...`` in a reconcile."""

    def __init__(self) -> None:
        super().__init__(TEXT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        controller = getattr(record, "controller", None)
        key = getattr(record, "key", None)
        if controller is None and key is None:
            return line
        extra = " ".join(f"{k}={v}" for k, v in (("controller", controller), ("key", key)) if v)
        head, sep, tail = line.partition("\n")
        return f"{head} {extra}{sep}{tail}"


class JsonFormatter(logging.Formatter):
    """One JSON object a line (see the module docs)."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "component": self.component,
        }
        for field in ("controller", "key", "trace_id", "span_id"):
            value = getattr(record, field, None)
            if value:
                line[field] = value
        if record.exc_info:
            line["err"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(args: argparse.Namespace, component: str) -> None:
    """Send the process's logs to stderr as ``args`` asks (see :func:`add_logging_flags`);
    ``component`` names the process in JSON lines (``steward-informer``, ...)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Context())
    fmt = getattr(args, "logging_format", "text")
    handler.setFormatter(JsonFormatter(component) if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    verbosity = getattr(args, "verbosity", 0) or 0
    root.setLevel(logging.DEBUG if verbosity >= DEBUG_FROM else logging.INFO)
