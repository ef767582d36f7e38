#!/usr/bin/env python3
"""Check the import layers of the ``steward`` package against its contracts.

The contracts live in pyproject.toml, table ``[tool.steward.import-contracts]``: ``roots``
are the source directories that each hold a part of the package (one per distribution;
``*`` matches any one directory name, as in ``services/controllers/*/src``, and a pattern
must match at least one), and each ``[[tool.steward.import-contracts.contract]]`` is either

- a *forbidden* contract: no module of ``modules`` imports any of ``forbidden``; or
- an *independence* contract: no module of one of ``independent`` imports another.

A name stands for that module and every module below it; ``steward.__init__`` stands for
the top-level package's own module alone. A ``*`` in a name matches any one component:
``steward.controllers.*`` stands for every package or module directly below
``steward.controllers`` that the roots hold (so ``independent = ["steward.controllers.*"]``
keeps every controller, present and future, from importing another). Every import
counts, wherever it is (inside a function or an ``if TYPE_CHECKING:`` block too):
``import a.b``, ``from a import b`` (an import of ``a`` and of ``a.b``), relative
imports (resolved against the importing module's package) and
``importlib.import_module("a.b")`` or ``__import__("a.b")`` with a literal name.

Usage: scripts/check-imports.py [--repo DIR]   (default: the checkout holding this script)
Prints one line per violation (``path:line: module imports target [contract]``) and exits
1 if there is any, 2 when the contracts cannot be read; prints a summary and exits 0
otherwise.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

TABLE = ("tool", "steward", "import-contracts")
PACKAGE = "steward"


class ContractError(Exception):
    """The contracts are missing, malformed or name modules no root holds."""


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Import:
    target: str
    line: int


@dataclass(frozen=True)
class Contract:
    name: str
    description: str
    modules: tuple[str, ...]
    forbidden: tuple[str, ...] = ()
    independent: bool = False


@dataclass(frozen=True)
class Violation:
    contract: str
    module: Module
    line: int
    target: str

    def render(self, repo: Path) -> str:
        path = self.module.path
        shown = path.relative_to(repo) if path.is_relative_to(repo) else path
        return f"{shown}:{self.line}: {self.module.name} imports {self.target} [{self.contract}]"


# Reading ----------------------------------------------------------------------------------
def load_contracts(pyproject: Path) -> tuple[list[str], list[Contract]]:
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ContractError(f"cannot read {pyproject}: {err}") from err
    table = data
    for key in TABLE:
        table = table.get(key, {})
    if not table:
        raise ContractError(f"{pyproject} has no [{'.'.join(TABLE)}] table")
    roots = table.get("roots")
    if not isinstance(roots, list) or not roots:
        raise ContractError("import-contracts: 'roots' must list the source directories")
    contracts = []
    for raw in table.get("contract", []):
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ContractError(f"import-contracts: a contract without a name: {raw}")
        description = str(raw.get("description", ""))
        if "independent" in raw:
            modules = tuple(raw["independent"])
            enough = len(modules) >= 2 or any("*" in m for m in modules)
            if not enough or "modules" in raw or "forbidden" in raw:
                raise ContractError(f"contract {name}: 'independent' alone, naming two or more")
            contracts.append(Contract(name, description, modules, independent=True))
            continue
        modules, forbidden = tuple(raw.get("modules", ())), tuple(raw.get("forbidden", ()))
        if not modules or not forbidden:
            raise ContractError(f"contract {name}: needs 'modules' and 'forbidden'")
        contracts.append(Contract(name, description, modules, forbidden))
    if not contracts:
        raise ContractError("import-contracts: no contract")
    return [str(r) for r in roots], contracts


def expand_roots(repo: Path, roots: Sequence[str]) -> list[Path]:
    """The source directories the roots name, ``*`` patterns expanded (sorted).

    Raises:
        ContractError: a pattern matches no directory.
    """
    found: list[Path] = []
    for root in roots:
        if "*" not in root:
            found.append(repo / root)
            continue
        matched = sorted(p for p in repo.glob(root) if p.is_dir())
        if not matched:
            raise ContractError(f"root {root} matches no directory")
        found.extend(matched)
    return found


def discover(repo: Path, roots: Sequence[str]) -> list[Module]:
    """Every module of the package under the roots (``*`` patterns expanded)."""
    modules = []
    for base in expand_roots(repo, roots):
        root = base.relative_to(repo) if base.is_relative_to(repo) else base
        if not (base / PACKAGE).is_dir():
            raise ContractError(f"root {root} holds no {PACKAGE}/ directory")
        for path in sorted((base / PACKAGE).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            modules.append(Module(".".join(parts), path, is_package))
    return modules


def imports_of(module: Module) -> Iterator[Import]:
    """Every import in the module, wherever it is, as absolute module names."""
    tree = ast.parse(module.path.read_bytes(), filename=str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    continue  # beyond the top-level package: Python refuses it anyway
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, node.module] if node.module else parts)
            else:
                base = node.module or ""
            if base:
                yield Import(base, node.lineno)
            for alias in node.names:
                if alias.name != "*":
                    yield Import(f"{base}.{alias.name}" if base else alias.name, node.lineno)
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            arg = node.args[0]
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            yield Import(arg.value, node.lineno)


def _dynamic_import(node: ast.Call) -> bool:
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )
    return (
        named
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


# Checking ---------------------------------------------------------------------------------
def covers(pattern: str, name: str) -> bool:
    """Whether ``pattern`` (a module and all below it; ``pkg.__init__``: pkg alone) names
    the module ``name``."""
    if pattern.endswith(".__init__"):
        return name == pattern.removesuffix(".__init__")
    return name == pattern or name.startswith(pattern + ".")


def expand(patterns: Sequence[str], names: set[str]) -> tuple[str, ...]:
    """The names ``patterns`` stand for: each pattern with a ``*`` replaced by the module
    names it matches (as many components, ``*`` one component each), sorted; the others
    as they are."""
    out: list[str] = []
    for pattern in patterns:
        if "*" not in pattern:
            out.append(pattern)
            continue
        depth = pattern.count(".")
        out.extend(
            sorted(n for n in names if n.count(".") == depth and fnmatch.fnmatchcase(n, pattern))
        )
    return tuple(dict.fromkeys(out))


def resolve(contract: Contract, names: set[str]) -> Contract:
    """``contract`` with its ``*`` patterns expanded against the discovered modules.

    Raises:
        ContractError: a pattern matches no module, or an independence contract is left
            with fewer than two.
    """
    for pattern in (*contract.modules, *contract.forbidden):
        if "*" in pattern and not expand([pattern], names):
            raise ContractError(f"contract {contract.name} names {pattern}: no such module")
    modules, forbidden = expand(contract.modules, names), expand(contract.forbidden, names)
    if contract.independent and len(modules) < 2:
        raise ContractError(
            f"contract {contract.name}: 'independent' names {len(modules)} module(s); "
            "it needs two or more"
        )
    return Contract(contract.name, contract.description, modules, forbidden, contract.independent)


def check(repo: Path) -> tuple[list[Contract], list[Violation]]:
    roots, contracts = load_contracts(repo / "pyproject.toml")
    modules = discover(repo, roots)
    names = {m.name for m in modules}
    contracts = [resolve(contract, names) for contract in contracts]
    for contract in contracts:
        for pattern in (*contract.modules, *contract.forbidden):
            if not any(covers(pattern, n) for n in names):
                raise ContractError(f"contract {contract.name} names {pattern}: no such module")
    violations = []
    for module in modules:
        try:
            found = list(imports_of(module))
        except SyntaxError as err:
            raise ContractError(f"{module.path}:{err.lineno}: cannot parse: {err.msg}") from err
        for contract in contracts:
            own = [p for p in contract.modules if covers(p, module.name)]
            if not own:
                continue
            if contract.independent:
                banned = [p for p in contract.modules if p not in own]
            else:
                banned = list(contract.forbidden)
            seen: set[tuple[int, str]] = set()
            for imp in found:
                hit = next((b for b in banned if covers(b, imp.target)), None)
                if hit is None or (imp.line, hit) in seen:
                    continue
                seen.add((imp.line, hit))  # `from a import b` names a and a.b: report once
                violations.append(Violation(contract.name, module, imp.line, imp.target))
    return contracts, violations


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="check-imports", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose pyproject.toml holds the contracts (default: this one)",
    )
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    try:
        contracts, violations = check(repo)
    except ContractError as err:
        print(f"check-imports: error: {err}", file=sys.stderr)
        return 2
    for violation in violations:
        print(violation.render(repo))
    broken = sorted({v.contract for v in violations})
    for contract in contracts:
        state = "BROKEN" if contract.name in broken else "kept"
        print(f"  {state:6}  {contract.name}: {contract.description}")
    if broken:
        print(
            f"check-imports: {len(broken)} of {len(contracts)} contracts broken: "
            f"{', '.join(broken)}"
        )
        return 1
    print(f"check-imports: {len(contracts)} contracts kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
