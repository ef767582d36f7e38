#!/usr/bin/env python3
"""Check the relative links of the repository's Markdown files.

Every tracked ``*.md`` file (``git ls-files '*.md'``) is read, and every inline link
``[text](target)`` or image ``![alt](target)`` whose target is relative (not ``http:``,
``https:``, ``mailto:`` or another scheme) is checked:

- ``path`` and ``path#anchor``: the path, resolved against the linking file's directory
  (or the repository's root when it starts with ``/``), must exist;
- ``#anchor`` alone, or ``path#anchor`` where ``path`` is a Markdown file: the file must
  have a heading whose GitHub slug is ``anchor`` (lowercase; punctuation other than ``-``,
  ``_`` and spaces dropped; spaces turned into ``-``; a repeated heading gets ``-1``,
  ``-2``, ... as GitHub numbers them).

Code spans and fenced code blocks are skipped, in the links' search and the headings'.

Usage: scripts/check-links.py [--repo DIR] [FILE.md ...]
(default: the checkout holding this script, every tracked Markdown file). Prints one line
per broken link (``path:line: broken link target (reason)``) and exits 1 if there is any;
prints a summary and exits 0 otherwise; exits 2 when the files cannot be listed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
# [text](target) or [text](<target>) or [text](target "title"); text may hold one level
# of nested brackets (an image inside a link).
LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
    r"\(\s*(?:<(?P<angled>[^>]*)>|(?P<bare>[^\s()]*(?:\([^\s()]*\)[^\s()]*)*))"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(?P<text>.*?)(?:\s+#+)?\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HTML_ANCHOR = re.compile(r"""<a\s+[^>]*(?:name|id)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)


@dataclass(frozen=True)
class Link:
    """A relative link found in a Markdown file."""

    source: Path
    line: int
    target: str


def outside_fences(lines: Sequence[str]) -> Iterator[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    fence: str | None = None
    for number, line in enumerate(lines, start=1):
        opening = FENCE.match(line)
        if fence is not None:
            closing = opening is not None and opening.group(1).startswith(fence)
            if closing and not line.strip().strip(fence[0]):
                fence = None
            continue
        if opening is not None:
            fence = opening.group(1)
            continue
        yield number, line


def strip_code(lines: Sequence[str]) -> Iterator[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1, with code spans blanked."""
    for number, line in outside_fences(lines):
        yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags go
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file defines: its headings' slugs and HTML anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for _, line in strip_code(lines):
        for name in HTML_ANCHOR.findall(line):
            found.add(name)
    for _, line in outside_fences(lines):
        heading = HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group("text"))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path, shown: Path) -> Iterator[Link]:
    """The relative links of a Markdown file, ``shown`` being its name in messages."""
    for number, line in strip_code(path.read_text(encoding="utf-8").splitlines()):
        for match in LINK.finditer(line):
            target = (
                match.group("angled") if match.group("angled") is not None else match.group("bare")
            )
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            yield Link(shown, number, target)


def problem(link: Link, repo: Path, cache: dict[Path, set[str]]) -> str | None:
    """Why a link is broken, or None when its target exists."""
    path_part, _, anchor = link.target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if path_part:
        base = repo if path_part.startswith("/") else (repo / link.source).parent
        target = (base / path_part.lstrip("/")).resolve()
        if not target.exists():
            return "no such file"
    else:
        target = (repo / link.source).resolve()
    if not anchor or target.is_dir() or target.suffix.lower() != ".md":
        return None
    if target not in cache:
        cache[target] = anchors(target)
    if unquote(anchor).lower() not in {a.lower() for a in cache[target]}:
        return "no such heading"
    return None


def tracked_markdown(repo: Path) -> list[Path]:
    """The Markdown files git tracks in the checkout, relative to it."""
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--", "*.md"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [Path(name) for name in listing.stdout.split("\0") if name]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout to check (default: the one holding this script)",
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="Markdown files (default: every tracked one)"
    )
    args = parser.parse_args(argv)
    repo: Path = args.repo.resolve()
    try:
        files: list[Path] = list(args.files) or tracked_markdown(repo)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"check-links: cannot list the Markdown files of {repo}: {error}", file=sys.stderr)
        return 2
    cache: dict[Path, set[str]] = {}
    broken = 0
    checked = 0
    for name in files:
        path = name if name.is_absolute() else repo / name
        if not path.is_file():  # tracked but deleted in the work tree
            continue
        shown = path.resolve().relative_to(repo) if path.resolve().is_relative_to(repo) else path
        for link in links(path, shown):
            checked += 1
            reason = problem(link, repo, cache)
            if reason is not None:
                broken += 1
                print(f"{link.source}:{link.line}: broken link {link.target} ({reason})")
    if broken:
        print(f"check-links: {broken} broken of {checked} relative links", file=sys.stderr)
        return 1
    print(f"check-links: {checked} relative links in {len(files)} Markdown files, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
