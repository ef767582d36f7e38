"""Starting one component: its process and log, and the wait until it is healthy."""

from __future__ import annotations

import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from steward.cluster.config import ClusterConfig
from steward.cluster.errors import ClusterError, ComponentFailedError, PortInUseError
from steward.cluster.pki import KeyPair
from steward.cluster.process import spawn, tail
from steward.cluster.progress import Progress
from steward.cluster.state import LOOPBACK, ClusterState


def any_body(_: bytes) -> bool:
    return True


def says_ok(body: bytes) -> bool:
    """The body of a Kubernetes component's ``/healthz`` or ``/readyz`` when healthy."""
    return body.strip() == b"ok"


@dataclass(frozen=True)
class Probe:
    """An HTTP(S) GET that answers 200, with a body ``expect`` accepts, once healthy."""

    url: str
    ctx: ssl.SSLContext | None = None
    expect: Callable[[bytes], bool] = any_body

    def ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=2, context=self.ctx) as resp:  # noqa: S310
                return resp.status == 200 and self.expect(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return False


@dataclass(frozen=True)
class Spec:
    """How to run one component: its name (that of its log), command line and probe."""

    name: str
    argv: list[str]
    probe: Probe


def secure_serving(kubeconfig: Path, port: int, serving: KeyPair) -> list[str]:
    """The flags of a server built on k8s.io/apiserver that serves HTTPS on loopback
    ``port`` with ``serving`` and asks kube-apiserver, as ``kubeconfig``'s user, who its
    callers are and what they may do."""
    return [
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
    ]


def launch(state: ClusterState, name: str, argv: list[str], config: ClusterConfig) -> None:
    """Start component ``name``, its output in its log, and record its process."""
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    _, record = spawn(
        name,
        argv,
        state.log(name),
        env=env,
        cwd=state.directory,
        die_with_parent=config.die_with_parent,
    )
    state.processes.append(record)
    state.save()


def run(state: ClusterState, spec: Spec, config: ClusterConfig, out: Progress) -> None:
    """Launch ``spec`` and wait until its probe says it is healthy."""
    launch(state, spec.name, spec.argv, config)
    poll(
        state,
        spec.name,
        spec.probe.url,
        spec.probe.ok,
        timeout=config.start_timeout,
        out=out,
        interval=0.1,
    )


def poll(
    state: ClusterState,
    name: str,
    where: str,
    ready: Callable[[], bool],
    *,
    timeout: float,
    out: Progress,
    interval: float,
    done: str = "healthy",
    late: Callable[[], str] | None = None,
) -> None:
    """Wait until ``ready()`` (component ``name`` is ``done`` at ``where``).

    Raises:
        ClusterError: the component exited first, or ``timeout`` seconds passed (with
            ``late()`` as the reason, if given).
    """
    record = state.process(name)
    started = time.monotonic()
    out.say(f"waiting for {name} ({where})")
    while True:
        if not record.alive():
            raise failure(state, name, "exited during start-up")
        if ready():
            out.say(f"{name} is {done} after {time.monotonic() - started:.1f}s")
            return
        waited = time.monotonic() - started
        if waited > timeout:
            raise failure(state, name, late() if late else f"was not {done} after {timeout:.0f}s")
        out.tick(f"still waiting for {name}: {waited:.0f}s")
        time.sleep(interval)


def failure(state: ClusterState, name: str, what: str) -> ClusterError:
    """The error saying component ``name`` did ``what``, with the last lines of its log."""
    log = state.log(name)
    last = tail(log)
    if "address already in use" in last:
        return PortInUseError(
            f"{name} {what}: a port it needs was taken by another process "
            f"(ports: {state.ports}). Last lines of {log}:\n{last}"
        )
    return ComponentFailedError(f"{name} {what}. Last lines of {log}:\n{last}")
