"""The tools agnhost's image carries for the ``[sig-network]`` specs, run as they run them.

``steward.images.e2e_tools`` puts Debian's curl, OpenBSD netcat and GNU wget (and dash
for ``/bin/sh``) into agnhost's layer. Here agnhost's layers (busybox's, then its own)
are unpacked in order into a tree of the test's own and each command the specs run in an
agnhost pod is run in it (``chroot`` with ``/proc`` mounted, the image's PATH,
``sh -c`` as ``kubectl exec`` does) against a server of the test on loopback: the service jig's
``echo hostName | nc -v -t -w 2 <ip> <port>`` must print the server's answer (an
empty output is "service is not reachable"), ``curl -g -q -s --connect-timeout 2`` and
``wget -T 5 -qO-`` must fetch a page; busybox's applets the ``[sig-apps]`` specs use
must still run. The nginx image's layers are unpacked the same way for what the specs
run in nginx pods (``sh -c``, ``ls``) and ``nginx -t``; and the nginx tree's own checks
must refuse a tree missing a library nginx links. Needs root (chroot), umoci and
busybox-static, as the archive's tests.
"""

from __future__ import annotations

import http.server
import os
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from steward import images
from steward.cluster.progress import Progress
from steward.images import e2e_images, e2e_tools
from tests.conftest import skip_or_fail
from tests.images import test_build as _build
from tests.images import test_e2e_images as _e2e

# The archive and its layout, built once by the archive's own fixtures.
pause_binary = _build.pause_binary
agnhost_binary = _e2e.agnhost_binary
built = _e2e.built
layout = _e2e.layout

ANSWER = "steward-e2e-tools"
"""What the test's servers answer."""


@pytest.fixture(scope="module")
def agnhost_root(
    built: images.BuiltE2E, layout: _build.Layout, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """agnhost's file system: its layers unpacked in their order."""
    if os.geteuid() != 0:
        skip_or_fail("running the image's tools (chroot) needs root")
    root = tmp_path_factory.mktemp("agnhost-root")
    for digest in built.images[images.AGNHOST_IMAGE].layers:
        subprocess.run(["tar", "-x", "-f", str(layout.blob(digest)), "-C", str(root)], check=True)
    return root


def _sh(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    """``sh -c command`` in ``root`` with the image's PATH, as ``kubectl exec`` runs it:
    with ``/proc`` mounted, as in a container (busybox's shell runs its own applets
    instead of PATH's commands only when it finds itself in ``/proc/self/exe``), in
    mount and PID namespaces of its own (gone when it exits); the machine's network."""
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation=private",
            "--pid",
            "--fork",
            f"--mount-proc={root / 'proc'}",
            "chroot",
            str(root),
            "/bin/sh",
            "-c",
            command,
        ],
        env={"PATH": e2e_images.E2E_PATH},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class _Line(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.rfile.readline()
        self.wfile.write(f"{ANSWER}\n".encode())


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = ANSWER.encode() if self.path == "/hostname" else b"?"
        self.send_response(200 if self.path == "/hostname" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def line_port() -> Iterator[int]:
    """A TCP server on loopback answering one line to each connection."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Line)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    """An HTTP server on loopback serving ``/hostname``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.integration
def test_nc_as_the_service_jig_runs_it(agnhost_root: Path, line_port: int) -> None:
    # testEndpointReachability (test/e2e/framework/service/jig.go): a non-empty standard
    # output within 2 minutes, else "service is not reachable".
    done = _sh(agnhost_root, f"echo hostName | nc -v -t -w 2 127.0.0.1 {line_port}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER
    assert "succeeded" in done.stderr  # OpenBSD netcat's -v


@pytest.mark.integration
def test_curl_as_the_specs_run_it(agnhost_root: Path, http_port: int) -> None:
    url = f"http://127.0.0.1:{http_port}/hostname"
    done = _sh(agnhost_root, f"curl -g -q -s --max-time 15 --connect-timeout 1 {url}")
    assert (done.returncode, done.stdout) == (0, ANSWER), done.stderr
    code = _sh(agnhost_root, f"curl -o /dev/null -i -q -s -w %{{http_code}} {url}x")
    assert code.stdout == "404"


@pytest.mark.integration
def test_wget_with_a_timeout(agnhost_root: Path, http_port: int) -> None:
    # checkReachabilityFromPod (test/e2e/network/service.go); busybox 1.35's wget
    # crashes whenever -T is given.
    done = _sh(agnhost_root, f'wget -T 5 -qO- "http://127.0.0.1:{http_port}/hostname"')
    assert (done.returncode, done.stdout) == (0, ANSWER), done.stderr
    refused = _sh(agnhost_root, "wget -T 5 -qO- http://127.0.0.1:9/")
    assert refused.returncode not in (0, 139, -11) and refused.stdout == ""


@pytest.mark.integration
def test_busybox_applets_still_run(agnhost_root: Path) -> None:
    # The [sig-apps] specs run these in agnhost pods; /bin/sh is dash, the applets stay.
    done = _sh(agnhost_root, "id -u; sleep 0; echo a-b | cut -d- -f2; ls /bin/busybox")
    assert (done.returncode, done.stdout) == (0, "0\nb\n/bin/busybox\n"), done.stderr


# ------------------------------------------------------------------------------ nginx


@pytest.fixture(scope="module")
def nginx_root(
    built: images.BuiltE2E, layout: _build.Layout, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """nginx's file system: its layers (busybox's, then Debian's nginx) unpacked in order."""
    if os.geteuid() != 0:
        skip_or_fail("running the image's commands (chroot) needs root")
    root = tmp_path_factory.mktemp("nginx-root")
    for digest in built.images[images.NGINX_IMAGE].layers:
        subprocess.run(["tar", "-x", "-f", str(layout.blob(digest)), "-C", str(root)], check=True)
    return root


@pytest.mark.integration
def test_nginx_image_runs_what_the_specs_run(nginx_root: Path) -> None:
    # preStop hooks (``sh -c "while true; do echo preStop; sleep 1; done"``), the storage
    # specs' scripts (``/bin/sh -c``), and nginx -t as the image's user www-data sees it.
    done = _sh(
        nginx_root,
        "echo preStop; sleep 0; ls /usr/share/nginx/html; nginx -e stderr -t 2>&1 | tail -1",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["preStop", "index.html"], done.stdout
    assert lines[2].endswith("test is successful"), done.stdout


@pytest.mark.integration
def test_nginx_tree_checks_catch_a_missing_library(
    nginx_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """finish_nginx keeps the libraries it is told nginx links and runs nginx in what it
    kept: the finished tree finishes again as it was; one library fewer in the list and
    nginx cannot start there, which the checks refuse."""
    nginx = e2e_tools.ensure_nginx(out=Progress(interval=15.0))
    for name in ("again", "short"):
        root = tmp_path / name
        root.mkdir()
        subprocess.run(["tar", "-x", "-f", str(nginx.tar), "-C", str(root)], check=True)
    assert e2e_tools.finish_nginx(tmp_path / "again") == nginx.packages
    assert (tmp_path / "again/var/log/nginx/error.log").readlink() == Path("/dev/stderr")
    short = tuple(lib for lib in e2e_tools.NGINX_LIBRARIES if not lib.startswith("libpcre2"))
    monkeypatch.setattr(e2e_tools, "NGINX_LIBRARIES", short)
    with pytest.raises(images.ImageError, match=r"libpcre2-8\.so\.0"):
        e2e_tools.finish_nginx(tmp_path / "short")
