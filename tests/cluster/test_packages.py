"""The Debian packages and host checks of real nodes, on this machine as it is.

The machine that runs the tests (``make test`` runs ``make node-packages`` first) has
every package installed, runs as root and has an address of its own; the tests check
that, and the messages that a machine without them gets (with a package table and an
effective user id of their own: nothing is mocked).
"""

from __future__ import annotations

import io
import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from steward.cluster import packages
from steward.cluster.errors import ClusterError, PrerequisiteError
from steward.cluster.packages import ALL, NODE_PACKAGES, Package
from steward.cluster.progress import Progress

pytestmark = pytest.mark.unit

NOT_INSTALLED = Package(
    "steward-test-no-such-package",
    "/nonexistent/steward-test-no-such-package/bin/tool",
    "a package no machine has",
)


def quiet() -> Progress:
    return Progress(io.StringIO())


def test_every_package_is_installed_here() -> None:
    assert packages.missing() == []
    assert packages.missing(NODE_PACKAGES) == []
    for package in ALL:
        assert Path(package.proof).is_absolute(), package
        assert package.installed(), package


def test_the_cni_bridge_is_among_the_proofs() -> None:
    proofs = {package.name: package.proof for package in ALL}
    assert proofs["containernetworking-plugins"] == "/usr/lib/cni/bridge"
    assert {"runc", "containerd", "iptables", "iproute2"} <= proofs.keys()
    assert {"mmdebstrap", "umoci", "busybox-static"} <= proofs.keys()


def test_a_package_without_its_file_is_missing(tmp_path: Path) -> None:
    present = Package("steward-test-present", str(tmp_path / "present"), "a file made here")
    Path(present.proof).write_text("")
    table = (present, NOT_INSTALLED, *ALL)
    assert packages.missing(table) == [NOT_INSTALLED.name]
    Path(present.proof).unlink()
    assert packages.missing(table) == [present.name, NOT_INSTALLED.name]


def test_ensure_with_everything_installed_does_nothing() -> None:
    stream = io.StringIO()
    packages.ensure(ALL, out=Progress(stream))
    packages.ensure(ALL, out=Progress(stream), install=False, euid=1000)
    assert stream.getvalue() == ""


def test_without_root_the_message_names_the_apt_get_command() -> None:
    with pytest.raises(PrerequisiteError) as caught:
        packages.ensure((*ALL, NOT_INSTALLED), out=quiet(), euid=1000)
    message = str(caught.value)
    assert "\n" not in message
    assert NOT_INSTALLED.name in message
    assert f"sudo apt-get install -y --no-install-recommends {NOT_INSTALLED.name}" in message
    assert "runc" not in message  # installed ones are not asked for
    assert isinstance(caught.value, ClusterError)


def test_without_installing_the_message_says_how_to_install() -> None:
    with pytest.raises(PrerequisiteError) as caught:
        packages.ensure((NOT_INSTALLED,), out=quiet(), install=False, euid=0)
    message = str(caught.value)
    assert "\n" not in message
    assert f"`apt-get install -y --no-install-recommends {NOT_INSTALLED.name}`" in message
    assert "sudo" not in message  # root needs none
    assert "make node-packages" in message


def test_host_ip_is_an_address_of_this_machine() -> None:
    address = packages.host_ip()
    parsed = ipaddress.IPv4Address(address)
    assert not parsed.is_loopback and not parsed.is_unspecified
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"inet {address}/" in shown
    # Only an address of one of the machine's interfaces can be bound.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))


def test_this_machine_can_host_real_nodes() -> None:
    assert os.geteuid() == 0, "the test machine runs as root"
    packages.check_real_node_host()


def test_host_problems_are_told_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError) as caught:
        packages.check_real_node_host(euid=1000, cgroup_root=str(tmp_path / "no-cgroup"))
    message = str(caught.value)
    assert "\n" not in message
    assert "root" in message and "sudo" in message
    assert str(tmp_path / "no-cgroup") in message


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    # steward.cluster imports the module before runpy runs it as __main__: harmless.
    quiet_runpy = ["-W", "ignore::RuntimeWarning:runpy"]
    return subprocess.run(
        [sys.executable, *quiet_runpy, "-m", "steward.cluster.packages", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_module_help_explains() -> None:
    out = run_module("--help")
    assert out.returncode == 0, out.stderr
    assert "apt-get install" in out.stdout and "--check" in out.stdout
    assert "containernetworking-plugins" in out.stdout


def test_module_check_reports_every_package() -> None:
    out = run_module("--check")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(ALL)
    assert all(line.startswith("ok ") for line in lines)


def test_module_installs_nothing_when_all_present() -> None:
    out = run_module()
    assert out.returncode == 0, out.stderr
    assert "installing" not in out.stderr
    assert "present" in out.stderr
