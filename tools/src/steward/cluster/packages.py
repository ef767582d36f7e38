"""The Debian packages that real nodes and image builds need, and the host they need.

Real nodes run kubelet on the machine itself against containerd and runc, with the CNI
plugins' bridge for pod networking (:data:`NODE_PACKAGES`); their images are built
without a registry or daemon with mmdebstrap, umoci and a static busybox
(:data:`IMAGE_PACKAGES`). Each package is known by one file that proves it is installed.

:func:`missing` reports what is not installed, :func:`ensure` installs it with apt-get
(as root) or says the command that does, :func:`check_real_node_host` checks what else a
real node needs (root, cgroups, an address of the machine's own), and :func:`host_ip`
gives that address. ``python -m steward.cluster.packages`` (``make node-packages``)
installs every package; ``--check`` only reports.

# Errors
Everything missing raises :class:`PrerequisiteError` with one line: what is missing and
the command that provides it.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from steward.cluster.errors import ClusterError, PrerequisiteError
from steward.cluster.progress import Progress


@dataclass(frozen=True)
class Package:
    """A Debian package and the file whose presence proves it is installed."""

    name: str
    proof: str
    """Absolute path of a file the package installs."""
    purpose: str
    """What it is needed for (shown by ``--check``)."""

    def installed(self) -> bool:
        return os.path.lexists(self.proof)


NODE_PACKAGES: tuple[Package, ...] = (
    Package("runc", "/usr/sbin/runc", "the OCI runtime containerd starts containers with"),
    Package("containerd", "/usr/bin/containerd", "the container runtime kubelet talks CRI to"),
    Package(
        "containernetworking-plugins",
        "/usr/lib/cni/bridge",
        "the CNI plugins (bridge, host-local, portmap) of the pod network",
    ),
    Package("iptables", "/usr/sbin/iptables", "kube-proxy's and the CNI bridge's NAT rules"),
    Package("iproute2", "/bin/ip", "the host's addresses, and the CNI plugins' links"),
)
"""What a real node runs on: containerd, runc, the CNI plugins, iptables, iproute2."""

IMAGE_PACKAGES: tuple[Package, ...] = (
    Package("mmdebstrap", "/usr/bin/mmdebstrap", "the Debian root file systems of images"),
    Package("umoci", "/usr/bin/umoci", "OCI image layouts without a registry or daemon"),
    # /bin/busybox alone could be the dynamic `busybox` package's.
    Package(
        "busybox-static",
        "/usr/share/doc/busybox-static/copyright",
        "the static busybox of the small test images",
    ),
)
"""What the real nodes' images are built with."""

ALL: tuple[Package, ...] = NODE_PACKAGES + IMAGE_PACKAGES
"""Every package of real nodes and image builds."""

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}

_NOT_FOUND = re.compile(r"Unable to locate package|has no installation candidate")


def missing(packages: Sequence[Package] = ALL) -> list[str]:
    """Names of the ``packages`` that are not installed, in order."""
    return [p.name for p in packages if not p.installed()]


def install_command(names: Sequence[str], *, sudo: bool = False) -> str:
    """The apt-get command line that installs ``names``."""
    prefix = "sudo " if sudo else ""
    return f"{prefix}apt-get install -y --no-install-recommends {' '.join(names)}"


def ensure(
    packages: Sequence[Package] = ALL,
    *,
    out: Progress,
    install: bool = True,
    euid: int | None = None,
) -> None:
    """Make sure ``packages`` are installed, installing the missing ones with apt-get.

    Installs only as root (``euid``, by default the process's) on a machine with
    apt-get, and only with ``install``; otherwise a missing package raises
    :class:`PrerequisiteError` naming it and the command that installs it. A containerd
    daemon that the containerd package's postinst started is stopped again: real nodes
    run a containerd of their own.
    """
    absent = missing(packages)
    if not absent:
        return
    root = (os.geteuid() if euid is None else euid) == 0
    apt = shutil.which("apt-get")
    listed = ", ".join(absent)
    if not install:
        raise PrerequisiteError(
            f"Debian packages missing: {listed}; install them with "
            f"`{install_command(absent, sudo=not root)}` (or `make node-packages`)"
        )
    if not root:
        raise PrerequisiteError(
            f"Debian packages missing: {listed}, and installing them needs root; run "
            f"`{install_command(absent, sudo=True)}`"
        )
    if apt is None:
        raise PrerequisiteError(
            f"Debian packages missing: {listed}, and this machine has no apt-get; install "
            f"them with its package manager (on Debian: `{install_command(absent)}`)"
        )
    before = _containerd_pids()
    out.say(f"installing Debian packages: {listed}")
    started = time.monotonic()
    code, tail = _apt(apt, ["install", "-y", "--no-install-recommends", *absent], out)
    if code != 0 and any(_NOT_FOUND.search(line) for line in tail):
        out.say("apt-get does not know them yet: running apt-get update first")
        code, tail = _apt(apt, ["update"], out)
        if code == 0:
            code, tail = _apt(apt, ["install", "-y", "--no-install-recommends", *absent], out)
    _stop_new_containerd(before, just_installed="containerd" in absent, out=out)
    if code != 0:
        last = next((line for line in reversed(tail) if line.strip()), "")
        raise PrerequisiteError(f"`{install_command(absent)}` failed (exit {code}): {last.strip()}")
    still = missing(packages)
    if still:
        raise PrerequisiteError(
            f"apt-get installed {listed}, but these are still missing: {', '.join(still)} "
            f"(no {', '.join(p.proof for p in packages if p.name in still)})"
        )
    out.say(f"installed {listed} in {time.monotonic() - started:.0f}s")


def _apt(apt: str, args: list[str], out: Progress) -> tuple[int, list[str]]:
    """Run apt-get, showing its download, unpack and set-up lines; its exit code and the
    last lines of its output."""
    proc = subprocess.Popen(
        [apt, *args],
        env={**os.environ, **APT_ENV},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        tail = [*tail[-40:], line]
        if line.startswith(("Get:", "Unpacking ", "Setting up ", "E: ")):
            out.say(f"[apt-get] {line}")
        else:
            out.tick(f"[apt-get] {line}")
    return proc.wait(), tail


def _containerd_pids() -> set[int]:
    """The running containerd daemons with the package's default configuration: a real
    node's own containerd always has ``--config`` (``-c``) and is never among them."""
    found = subprocess.run(
        ["pgrep", "-x", "containerd"], capture_output=True, text=True, check=False
    )
    pids = set()
    for word in found.stdout.split():
        try:
            argv = Path(f"/proc/{word}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(arg in (b"-c", b"--config") or arg.startswith(b"--config=") for arg in argv):
            pids.add(int(word))
    return pids


def _stop_new_containerd(before: set[int], *, just_installed: bool, out: Progress) -> None:
    """Stop the containerd daemons that appeared while apt-get ran (the package's
    postinst starts its service where it can); the ones running before are left alone."""
    new = _containerd_pids() - before
    if not new:
        return
    systemctl = shutil.which("systemctl")
    if just_installed and systemctl and Path("/run/systemd/system").is_dir():
        # Under systemd the service would be restarted; it was not enabled before us.
        out.say("stopping and disabling containerd.service, which its package started")
        subprocess.run(
            [systemctl, "disable", "--now", "containerd.service"],
            capture_output=True,
            check=False,
        )
        new = _containerd_pids() - before
    for pid in sorted(new):
        out.say(f"stopping containerd (pid {pid}), which its package started")
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    while new and time.monotonic() < deadline:
        time.sleep(0.2)
        new &= _containerd_pids()
    for pid in new:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


_ADDR = re.compile(r"^\d+:\s+(\S+)\s+inet\s+([0-9.]+)/\d+")


def host_ip() -> str:
    """The first global-scope IPv4 address of this machine's own interfaces (``ip -4 -o
    addr show scope global``): what a real node's kubelet serves on and registers."""
    ip = shutil.which("ip") or "/bin/ip"
    try:
        shown = subprocess.run(
            [ip, "-4", "-o", "addr", "show", "scope", "global"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise PrerequisiteError(
            f"the ip command was not found; run `{install_command(['iproute2'], sudo=True)}`"
        ) from None
    for line in shown.stdout.splitlines():
        match = _ADDR.match(line)
        if match and not ipaddress.IPv4Address(match.group(2)).is_loopback:
            return match.group(2)
    raise PrerequisiteError(
        "real nodes need an IPv4 address on one of this machine's interfaces other than "
        "loopback (kube-apiserver refuses loopback node addresses); `ip -4 addr show scope "
        "global` lists none"
    )


def check_real_node_host(*, euid: int | None = None, cgroup_root: str = "/sys/fs/cgroup") -> None:
    """Check that this machine can host real nodes: root (kubelet, containerd and runc
    manage mounts, cgroups and network namespaces), cgroups at ``cgroup_root``, an IPv4
    address of its own (:func:`host_ip`). Every problem found is told in one line."""
    problems = []
    if (os.geteuid() if euid is None else euid) != 0:
        problems.append(
            "real nodes must run as root (kubelet, containerd and runc manage mounts, "
            "cgroups and network namespaces): run the command with sudo"
        )
    if not os.path.isdir(cgroup_root):
        problems.append(f"real nodes need cgroups, and {cgroup_root} does not exist")
    try:
        host_ip()
    except PrerequisiteError as err:
        problems.append(str(err))
    if problems:
        raise PrerequisiteError("; ".join(problems))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry of ``python -m steward.cluster.packages`` (``make node-packages``)."""
    parser = argparse.ArgumentParser(
        prog="python -m steward.cluster.packages",
        description=(
            "Install the Debian packages that Steward's real nodes and their image builds "
            "need, when missing: "
            + ", ".join(p.name for p in ALL)
            + ". Installing runs `apt-get install -y --no-install-recommends` (as root, "
            "noninteractive; `apt-get update` first only when apt-get does not know a "
            "package); a containerd daemon the package starts is stopped again. Without "
            "root it prints the sudo command instead and fails."
        ),
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only report what is installed and what is missing (exit 1 if any is)",
    )
    args = parser.parse_args(argv)
    if args.check:
        for package in ALL:
            state = "ok     " if package.installed() else "MISSING"
            print(f"{state} {package.name:28} {package.proof:42} {package.purpose}")
        absent = missing(ALL)
        if absent:
            root = os.geteuid() == 0
            print(f"install with: {install_command(absent, sudo=not root)}", file=sys.stderr)
            return 1
        return 0
    out = Progress()
    try:
        ensure(ALL, out=out)
    except ClusterError as err:
        print(f"node-packages: error: {err}", file=sys.stderr)
        return 1
    out.say(f"Debian packages of real nodes and images present: {', '.join(p.name for p in ALL)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
