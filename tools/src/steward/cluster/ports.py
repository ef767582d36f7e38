"""Free TCP ports on loopback for local clusters, tests and benchmarks.

Ports are picked outside the kernel's ephemeral range (``ip_local_port_range``): a port
picked from inside it by binding port 0 can be taken, before the component that should
listen on it starts, by any outgoing connection on the machine (the cluster's own clients
among them), and the component then fails with "address already in use". Concurrent pickers
(``cluster up`` in parallel test workers) walk one cursor, kept in :data:`CURSOR` under an
exclusive lock, so they do not hand out the same port twice before it is bound.
"""

from __future__ import annotations

import fcntl
import random
import socket
import tempfile
from collections.abc import Set
from pathlib import Path

LOOPBACK = "127.0.0.1"
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
POOL_START = 10000
CURSOR = Path(tempfile.gettempdir()) / "steward-ports.cursor"


def ephemeral_range(source: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux' default if unknown)."""
    try:
        low, high = (int(part) for part in source.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def pool(ephemeral: tuple[int, int]) -> range:
    """The ports to pick from: below the ephemeral range from POOL_START if at least
    1,000 fit there, else above it, else (nearly every port made ephemeral) every
    unprivileged port."""
    low, high = ephemeral
    if low - POOL_START >= 1000:
        return range(POOL_START, low)
    if 65535 - high >= 1000:
        return range(high + 1, 65536)
    return range(1024, 65536)


def bindable(port: int, host: str = LOOPBACK) -> bool:
    """Whether TCP ``port`` can be bound on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def reserve(
    count: int,
    *,
    avoid: Set[int] = frozenset(),
    cursor_file: Path | None = None,
    ephemeral: tuple[int, int] | None = None,
) -> list[int]:
    """``count`` distinct ports free on loopback now, none in ``avoid``, taken in turn
    from the pool after the ports the last caller (of any process) was given.

    Raises:
        OSError: no ``count`` free ports in the whole pool.
    """
    ports = pool(ephemeral or ephemeral_range())
    picked: list[int] = []
    with open(cursor_file or CURSOR, "a+", encoding="ascii") as cursor_io:
        fcntl.flock(cursor_io, fcntl.LOCK_EX)
        cursor_io.seek(0)
        try:
            cursor = int(cursor_io.read().strip())
        except ValueError:
            cursor = random.randrange(len(ports))  # noqa: S311 - where to start, not a secret
        tried = 0
        while len(picked) < count:
            if tried == len(ports):
                raise OSError(
                    f"no {count} free ports on {LOOPBACK} in {ports.start}-{ports.stop - 1}"
                )
            port = ports[cursor % len(ports)]
            cursor += 1
            tried += 1
            if port not in avoid and port not in picked and bindable(port):
                picked.append(port)
        cursor_io.seek(0)
        cursor_io.truncate()
        cursor_io.write(str(cursor % len(ports)))
    return picked
