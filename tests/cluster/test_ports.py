"""Port picking for local clusters: outside the ephemeral range, never twice in a row."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from steward.cluster import ports
from steward.cluster.state import PORTS, pick_ports

pytestmark = pytest.mark.unit


def test_ports_come_from_below_the_ephemeral_range(tmp_path: Path) -> None:
    # Breaks if picking falls back to port 0 (the kernel hands out ephemeral ports, which
    # outgoing connections also take).
    picked = ports.reserve(20, cursor_file=tmp_path / "c", ephemeral=(32768, 60999))
    assert len(set(picked)) == 20
    assert all(ports.POOL_START <= port < 32768 for port in picked)


def test_the_pool_moves_above_a_range_that_starts_low() -> None:
    assert ports.pool((1024, 40000)) == range(40001, 65536)
    assert ports.pool((1024, 65000)) == range(1024, 65536)
    assert ports.pool((32768, 60999)) == range(ports.POOL_START, 32768)


def test_consecutive_picks_share_a_cursor_and_skip_bound_ports(tmp_path: Path) -> None:
    # Breaks if the cursor is not kept between callers (two parallel `cluster up`s would
    # be given the same ports before either bound them) or a bound port is handed out.
    cursor = tmp_path / "cursor"
    first = ports.reserve(5, cursor_file=cursor)
    with socket.socket() as holder:
        next_port = ports.pool(ports.ephemeral_range())[int(cursor.read_text())]
        holder.bind(("127.0.0.1", next_port))
        holder.listen()
        second = ports.reserve(5, cursor_file=cursor)
    assert not set(first) & set(second)
    assert next_port not in second


def test_a_cluster_gets_every_role_with_fixed_ones_kept() -> None:
    fixed = {"apiserver": ports.reserve(1)[0]}
    picked = pick_ports(fixed)
    assert set(picked) == set(PORTS)
    assert picked["apiserver"] == fixed["apiserver"]
    assert len(set(picked.values())) == len(PORTS)


def test_a_garbled_cursor_file_starts_somewhere_in_the_pool(tmp_path: Path) -> None:
    cursor = tmp_path / "cursor"
    cursor.write_text("not a number")
    picked = ports.reserve(2, cursor_file=cursor, ephemeral=(32768, 60999))
    assert all(ports.POOL_START <= port < 32768 for port in picked)
    assert int(cursor.read_text()) in range(len(ports.pool((32768, 60999))))


def test_an_exhausted_pool_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "bindable", lambda port, host="127.0.0.1": False)
    with pytest.raises(OSError, match="no 1 free ports"):
        ports.reserve(1, cursor_file=tmp_path / "c")
