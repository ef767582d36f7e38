"""What every part of the image builder shares: errors, the epoch, the cache, commands."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from steward.cluster import binaries, packages
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress

RECIPE_VERSION = "2"
"""Bumped when what the builder produces changes in a way its inputs do not show."""

DEFAULT_EPOCH = 0
"""File mtimes and the images' ``created`` when ``SOURCE_DATE_EPOCH`` is not set."""


class ImageError(ClusterError):
    """Building or importing the images failed; the message says where."""


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` if set, else :data:`DEFAULT_EPOCH`."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        return DEFAULT_EPOCH
    try:
        return int(raw)
    except ValueError:
        raise ImageError(f"SOURCE_DATE_EPOCH is not a number of seconds: {raw!r}") from None


def rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def images_root() -> Path:
    """Where the base and the archives are cached: ``cache_root()/images``."""
    return binaries.cache_root() / "images"


def recipe_source() -> bytes:
    """The builder's own source, every module of this package by name: what it builds may
    change with any of them, so the caches' keys include it."""
    parts = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        data = path.read_bytes()
        parts.append(f"{path.name}\0{len(data)}\0".encode() + data)
    return b"".join(parts)


class InputsDigest:
    """A sha256 of labelled inputs, each framed by its label and length."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()

    def feed(self, label: str, data: bytes) -> None:
        self._digest.update(f"{label}\0{len(data)}\0".encode())
        self._digest.update(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def copy_out(archive: Path, output: Path) -> Path:
    """Copy ``archive`` to ``output`` (through ``output.partial``, so that ``output`` is
    never half-written) and return ``output``'s absolute path."""
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(output.name + ".partial")
    shutil.copyfile(archive, staging)
    staging.replace(output)
    return output


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageError(f"{what} needs root (mmdebstrap's root mode and chroot); run as root")


def require_tools(names: Sequence[str], out: Progress) -> None:
    wanted = [p for p in packages.IMAGE_PACKAGES if p.name in names]
    packages.ensure(wanted, out=out, install=False)


def run(
    cmd: Sequence[str],
    *,
    out: Progress,
    label: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``cmd`` and return its standard output; progress ticks show the elapsed time
    and its last line of standard error. A failure raises :class:`ImageError` with the
    tail of that output."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as err:
        raise ImageError(f"{label}: cannot run {cmd[0]}: {err}") from err
    assert proc.stdout is not None and proc.stderr is not None
    tail: list[str] = []
    chunks: list[str] = []
    stderr, stdout = proc.stderr, proc.stdout

    def pump_err() -> None:
        for line in stderr:
            tail.append(line.rstrip("\n"))
            del tail[:-60]

    def pump_out() -> None:
        chunks.append(stdout.read())

    threads = [threading.Thread(target=f, daemon=True) for f in (pump_err, pump_out)]
    for thread in threads:
        thread.start()
    try:
        while True:
            try:
                code = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                last = next((line for line in reversed(tail) if line.strip()), "")
                out.tick(f"[{label}] {time.monotonic() - started:.0f}s elapsed {last[:100]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for thread in threads:
            thread.join()
        stdout.close()
        stderr.close()
    if code != 0:
        raise ImageError(
            f"{label}: `{' '.join(cmd[:4])} …` failed (exit {code}):\n"
            + "\n".join(tail[-30:] or chunks[-1:])
        )
    return "".join(chunks)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def walk(root: Path, rel: str = "") -> Iterator[str]:
    """Paths under ``root`` (relative, ``/``-separated), parents before children, names
    in byte order; symbolic links are not followed."""
    here = root / rel if rel else root
    for name in sorted(os.listdir(here), key=os.fsencode):
        path = f"{rel}/{name}" if rel else name
        yield path
        if stat.S_ISDIR(os.lstat(root / path).st_mode):
            yield from walk(root, path)


@contextlib.contextmanager
def locked(out: Progress) -> Iterator[None]:
    """One image build at a time per cache directory."""
    images_root().mkdir(parents=True, exist_ok=True)
    with (images_root() / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.say(f"waiting for another image build ({images_root() / '.lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def prune(directory: Path, *, keep: int, prefix: str = "") -> None:
    """Keep the newest ``keep`` cache entries (subdirectories named ``prefix…``)."""
    entries = [p for p in directory.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)
