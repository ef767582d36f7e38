"""Kubernetes label and field selectors: parsing and matching, as the API server does.

# Errors
Every parser raises :class:`ValueError` whose message names the offending part of the
selector and what was expected; the service maps it to ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY_RE = re.compile(rf"^({_PREFIX}/)?{_NAME_PART}$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class Operator(Enum):
    """A label selector requirement's operator."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True)
class Requirement:
    """One requirement of a label selector, e.g. ``tier in (web, api)``."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (the API server's semantics)."""
        op = self.operator
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if op is Operator.EQUALS or op is Operator.IN:
            return value is not None and value in self.values
        # != and notin also match objects without the label, as in Kubernetes.
        return value is None or value not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector: the conjunction of its requirements (empty matches all)."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector on ``metadata.name`` and ``metadata.namespace``.

    ``equals`` and ``not_equals`` are (field, value) pairs; every one must hold.
    """

    equals: tuple[tuple[str, str], ...] = ()
    not_equals: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.equals and not self.not_equals

    def matches(self, namespace: str, name: str) -> bool:
        fields = {"metadata.name": name, "metadata.namespace": namespace}
        return all(fields[f] == v for f, v in self.equals) and all(
            fields[f] != v for f, v in self.not_equals
        )


SUPPORTED_FIELDS = ("metadata.name", "metadata.namespace")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in label selector {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise ValueError(f"unclosed '(' in label selector {text!r}")
    parts.append("".join(current))
    return parts


def _check_key(key: str, where: str) -> str:
    if not key:
        raise ValueError(f"missing label key in {where!r}")
    if len(key.split("/")[-1]) > 63 or not _KEY_RE.match(key):
        raise ValueError(
            f"invalid label key {key!r} in {where!r}: a key is an optional DNS prefix and "
            "'/', then at most 63 characters of alphanumerics, '-', '_' or '.', starting "
            "and ending with an alphanumeric"
        )
    return key


def _check_value(value: str, where: str) -> str:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise ValueError(
            f"invalid label value {value!r} in {where!r}: at most 63 characters of "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    return value


_SET_RE = re.compile(r"^\s*(?P<key>\S+?)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a Kubernetes label selector such as ``app=web,tier notin (cache),!legacy``.

    Supports ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key`` (exists) and ``!key``.
    An empty or blank string selects everything.

    Raises:
        ValueError: the selector is malformed; the message quotes the bad requirement.
    """
    if not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            raise ValueError(f"empty requirement in label selector {text!r}")
        requirements.append(_parse_requirement(part))
    return LabelSelector(tuple(requirements))


def _parse_requirement(part: str) -> Requirement:
    set_match = _SET_RE.match(part)
    if set_match:
        key = _check_key(set_match.group("key"), part)
        values = [v.strip() for v in set_match.group("values").split(",")]
        if values == [""]:
            raise ValueError(f"empty value set in {part!r}: give at least one value")
        for value in values:
            _check_value(value, part)
        op = Operator.IN if set_match.group("op") == "in" else Operator.NOT_IN
        return Requirement(key, op, frozenset(values))
    if "(" in part or ")" in part:
        raise ValueError(
            f"malformed set requirement {part!r}: expected 'key in (v1, v2)' or "
            "'key notin (v1, v2)'"
        )
    for token, op in (("!=", Operator.NOT_EQUALS), ("==", Operator.EQUALS), ("=", Operator.EQUALS)):
        if token in part:
            key, _, value = part.partition(token)
            key, value = key.strip(), value.strip()
            if any(c in value for c in "=!"):
                raise ValueError(f"unexpected operator in value of {part!r}")
            return Requirement(_check_key(key, part), op, frozenset({_check_value(value, part)}))
    if part.startswith("!"):
        return Requirement(_check_key(part[1:].strip(), part), Operator.DOES_NOT_EXIST)
    if any(c.isspace() for c in part):
        raise ValueError(
            f"cannot parse requirement {part!r}: expected 'key', '!key', 'key=value', "
            "'key!=value', 'key in (...)' or 'key notin (...)'"
        )
    return Requirement(_check_key(part, part), Operator.EXISTS)


def parse_field_selector(text: str) -> FieldSelector:
    """Parse a field selector on ``metadata.name``/``metadata.namespace`` (``=``, ``==``, ``!=``).

    An empty or blank string selects everything.

    Raises:
        ValueError: the selector is malformed or names an unsupported field; the message
            says which and lists the supported fields.
    """
    if not text.strip():
        return FieldSelector()
    equals: list[tuple[str, str]] = []
    not_equals: list[tuple[str, str]] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise ValueError(f"empty requirement in field selector {text!r}")
        for token, target in (("!=", not_equals), ("==", equals), ("=", equals)):
            if token in part:
                field, _, value = part.partition(token)
                field, value = field.strip(), value.strip()
                chosen = target
                break
        else:
            raise ValueError(
                f"field selector requirement {part!r} has no operator: "
                "expected 'field=value', 'field==value' or 'field!=value'"
            )
        if field not in SUPPORTED_FIELDS:
            raise ValueError(
                f"unsupported field {field!r} in field selector {text!r}: the informer "
                f"supports {', '.join(SUPPORTED_FIELDS)}"
            )
        if any(c in value for c in "=!"):
            raise ValueError(f"unexpected operator in value of {part!r}")
        chosen.append((field, value))
    return FieldSelector(tuple(equals), tuple(not_equals))


class HasOwners(Protocol):
    """What an owner filter reads of an object: its parsed owner references."""

    @property
    def api_version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def controller(self) -> bool: ...


@dataclass(frozen=True)
class OwnerSelector:
    """Objects whose controller owner is of one of ``kinds`` ((group, kind) pairs), and
    with ``orphans`` those without a controller owner too."""

    kinds: frozenset[tuple[str, str]]
    orphans: bool = False

    def matches(self, refs: Iterable[HasOwners]) -> bool:
        for ref in refs:
            if ref.controller:
                # The group of "apps/v1" is "apps"; of "v1" (the core group) it is "".
                return (ref.api_version.rpartition("/")[0], ref.kind) in self.kinds
        return self.orphans


def parse_owner_selector(kinds: Iterable[tuple[str, str]], orphans: bool) -> OwnerSelector:
    """An owner filter of (group, kind) pairs.

    Raises:
        ValueError: a kind is empty, or the filter names no kind and leaves orphans out
            (it would match nothing).
    """
    pairs = frozenset(kinds)
    for group, kind in pairs:
        if not kind:
            raise ValueError(f"owner_filter names group {group!r} without a kind")
    if not pairs and not orphans:
        raise ValueError(
            "owner_filter names no kind and leaves orphans out: it would match nothing "
            "(name the owner kinds, set orphans, or leave owner_filter unset)"
        )
    return OwnerSelector(pairs, orphans)


@dataclass(frozen=True)
class Filter:
    """What one subscriber or List asked for: namespace, label and field selectors, and
    for a Watch target the kinds of controller owner."""

    namespace: str = ""
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()
    owner: OwnerSelector | None = None

    @property
    def everything(self) -> bool:
        return not self.namespace and self.labels.empty and self.fields.empty and self.owner is None

    def narrowed(
        self, labels: LabelSelector, fields: FieldSelector, owner: OwnerSelector | None
    ) -> Filter:
        """This filter and those selectors: an object must pass all of them."""
        return Filter(
            namespace=self.namespace,
            labels=LabelSelector(self.labels.requirements + labels.requirements),
            fields=FieldSelector(
                self.fields.equals + fields.equals, self.fields.not_equals + fields.not_equals
            ),
            owner=owner if owner is not None else self.owner,
        )

    def admits(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        owner_references: Iterable[HasOwners],
    ) -> bool:
        """Whether an object passes every part of the filter, its owners included."""
        if not self.matches(namespace, name, labels):
            return False
        return self.owner is None or self.owner.matches(owner_references)

    def matches(self, namespace: str, name: str, labels: Mapping[str, str]) -> bool:
        """Whether an object with this namespace, name and labels passes the filter."""
        if self.namespace and namespace != self.namespace:
            return False
        if not self.fields.empty and not self.fields.matches(namespace, name):
            return False
        return self.labels.empty or self.labels.matches(labels)


def parse_filter(namespace: str, label_selector: str, field_selector: str) -> Filter:
    """Build a :class:`Filter` from request fields.

    Raises:
        ValueError: a selector is malformed (see the two parsers).
    """
    return Filter(
        namespace=namespace,
        labels=parse_label_selector(label_selector),
        fields=parse_field_selector(field_selector),
    )
