"""One command for every controller: ``python -m steward run <name | module:ATTR> [flags]``.

A controller is its definition (a :class:`~steward.ControllerDefinition`, by convention
``CONTROLLER`` in the package's ``controller`` module); no controller needs a ``main``
module of its own. The launcher finds the definition and hosts it with
:func:`steward.run`, the flags after the target going to the controller::

    python -m steward run job --kubeconfig=... --informer=... --manager=...
    python -m steward run steward.controllers.job.controller:CONTROLLER --help
    python -m steward list

# Targets
A *name* is looked up in the entry-point group :data:`GROUP` (``steward.controllers``),
where each controller distribution declares its definition in its ``pyproject.toml``::

    [project.entry-points."steward.controllers"]
    job = "steward.controllers.job.controller:CONTROLLER"

A target with a colon, ``module:ATTR`` (``ATTR`` may be dotted), is imported directly: a
controller that is not installed as a distribution (an example, a test's) runs the same
way.

# Errors
An unknown name, a module that cannot be imported or an attribute that is not a
controller definition is a usage error: the message names the target (and, for an
unknown name, the declared ones) on stderr, exit status 2. Everything after the target is
the controller's own command line: ``--help`` there prints the controller's flags.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from steward.runtime.controller import ControllerDefinition
from steward.runtime.host import run
from steward.version import add_version_flag

__all__ = ["GROUP", "LaunchError", "command", "declared_names", "main", "resolve"]

GROUP = "steward.controllers"
"""The entry-point group controller distributions declare their definitions in."""

PROG = "python -m steward"


class LaunchError(Exception):
    """The target names no controller definition; the message says why."""


def declared_names() -> tuple[str, ...]:
    """The names declared in :data:`GROUP`, sorted (reads metadata; imports nothing)."""
    return tuple(sorted({ep.name for ep in entry_points(group=GROUP)}))


def resolve(target: str) -> ControllerDefinition[Any]:
    """The controller definition ``target`` names: a declared name, or ``module:ATTR``.

    Raises:
        LaunchError: no such name, the module cannot be imported, no such attribute, or
            it is not a controller definition.
    """
    if ":" in target:
        module_name, _, attr = target.partition(":")
        try:
            found: Any = importlib.import_module(module_name)
        except ImportError as err:
            raise LaunchError(f"{target}: cannot import {module_name}: {err}") from err
        for part in attr.split("."):
            try:
                found = getattr(found, part)
            except AttributeError as err:
                raise LaunchError(f"{target}: {module_name} has no {attr}") from err
    else:
        declared = [ep for ep in entry_points(group=GROUP) if ep.name == target]
        if not declared:
            names = ", ".join(declared_names()) or "none"
            raise LaunchError(
                f"no controller named {target!r} (declared: {names}); give a declared "
                "name or module:ATTR"
            )
        try:
            found = declared[0].load()
        except Exception as err:
            raise LaunchError(f"{target} ({declared[0].value}) cannot be loaded: {err}") from err
    if not isinstance(found, ControllerDefinition):
        raise LaunchError(f"{target} is not a controller definition ({type(found).__name__})")
    return found


def command(target: str) -> tuple[str, ...]:
    """The arguments after the Python interpreter that run ``target``:
    ``("-m", "steward", "run", target)``; the controller's flags follow."""
    return ("-m", "steward", "run", target)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run a Steward controller: a declared name (see `list`) or a "
        "module:ATTR naming its definition. Flags after the target are the controller's "
        "(`run NAME --help` lists them).",
    )
    add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_cmd = sub.add_parser(
        "run",
        help="host a controller until SIGTERM or SIGINT",
        description="Host a controller until SIGTERM or SIGINT (steward.run). TARGET is "
        "a name declared under the entry points steward.controllers, or module:ATTR; the "
        "flags after it are the controller's (TARGET --help lists them).",
        usage=f"{PROG} run [-h] TARGET [FLAGS ...]",
    )
    run_cmd.add_argument("target", metavar="TARGET", help="a declared name, or module:ATTR")
    run_cmd.add_argument(
        "flags", nargs=argparse.REMAINDER, metavar="FLAGS", help="the controller's flags"
    )
    sub.add_parser("list", help="print the declared controllers' names, one a line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m steward``: the process's exit status (2 for a usage error)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        for name in declared_names():
            print(name)
        return 0
    try:
        definition = resolve(args.target)
    except LaunchError as err:
        print(f"{PROG} run: error: {err}", file=sys.stderr)
        return 2
    return run(definition, args.flags, prog=f"{PROG} run {args.target}")
