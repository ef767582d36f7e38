"""What build of Steward a process is: ``--version`` on every command and the
``steward_build_info`` metric, as Kubernetes' components have ``--version`` and
``kubernetes_build_info``.

The version is the installed ``steward`` distribution's (the workspace's, in a checkout
or an image); the runtime is ``python`` here (the Go and TypeScript runtimes report their
own).
"""

from __future__ import annotations

import argparse
import platform
import sys
import threading
import weakref
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Gauge

RUNTIME = "python"

_with_build_info: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()
_lock = threading.Lock()


def steward_version() -> str:
    """The installed ``steward`` distribution's version; ``unknown`` outside one."""
    try:
        return version("steward")
    except PackageNotFoundError:
        return "unknown"


_ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}


def platform_label() -> str:
    """The platform as Go names it (``linux/amd64``), alike in every runtime."""
    machine = platform.machine().lower()
    return f"{sys.platform}/{_ARCHES.get(machine, machine)}"


def version_line(prog: str) -> str:
    """What ``prog --version`` prints: ``prog <version> (python 3.11.x, linux/amd64)``."""
    return f"{prog} {steward_version()} ({RUNTIME} {platform.python_version()}, {platform_label()})"


def add_version_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, prog: str | None = None
) -> None:
    """``--version`` on ``parser`` (or a group of it, given the parser's ``prog``): print
    :func:`version_line` and exit 0."""
    name = prog if prog is not None else getattr(parser, "prog", "steward")
    parser.add_argument(
        "--version", action="version", version=version_line(name), help="print the version"
    )


def register_build_info(registry: CollectorRegistry) -> None:
    """``steward_build_info{version, runtime, runtime_version, platform} 1`` in
    ``registry`` (once: a second call on the same registry does nothing)."""
    with _lock:
        if registry in _with_build_info:
            return
        _with_build_info.add(registry)
    gauge = Gauge(
        "steward_build_info",
        "A metric with a constant '1' value labeled by the version of Steward, its runtime "
        "and the platform it runs on.",
        ["version", "runtime", "runtime_version", "platform"],
        registry=registry,
    )
    gauge.labels(
        steward_version(),
        RUNTIME,
        platform.python_version(),
        platform_label(),
    ).set(1)
