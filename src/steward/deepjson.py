"""JSON of any nesting depth: orjson when it can, a slow non-recursive codec when not.

The API server accepts objects nested far deeper (custom resources with
``x-kubernetes-preserve-unknown-fields``, up to 10,000 levels) than orjson encodes (254)
or decodes (1,024) and than Python's recursion allows. One such object must not stop a
type's watch, so readers fall back to :func:`loads_deep` and writers to :func:`dumps_deep`.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import orjson

_J = TypeVar("_J")


def dumps(obj: Any) -> bytes:
    """``obj`` as JSON: orjson, or :func:`dumps_deep` for what orjson refuses (nesting
    deeper than 254 levels, integers beyond 64 bits)."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return dumps_deep(obj)


def copy(value: _J) -> _J:
    """A deep copy of JSON data (dicts, lists, strings, numbers, booleans, None): what
    :func:`copy.deepcopy` gives for it, about eight times faster (encoded and decoded by
    orjson, or by the deep codec past orjson's limits). Other types are not JSON and come
    back as their JSON form (a tuple as a list) or raise ``TypeError``."""
    data = dumps(value)
    try:
        copied: _J = orjson.loads(data)
    except orjson.JSONDecodeError:
        copied = loads_deep(data)
    return copied


class _Text:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def dumps_deep(obj: Any) -> bytes:
    """Encode ``obj`` (dicts, lists, strings, numbers, booleans, None) as compact JSON
    without recursion, so any nesting depth works. Slow; only for what orjson refuses.

    Raises:
        TypeError: a value of another type; ValueError: NaN or an infinity.
    """
    out: list[str] = []
    work: list[Any] = [obj]
    scalar = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    while work:
        item = work.pop()
        if isinstance(item, _Text):
            out.append(item.text)
        elif isinstance(item, dict):
            work.append(_Text("}"))
            entries = list(item.items())
            for i in range(len(entries) - 1, -1, -1):
                key, value = entries[i]
                if not isinstance(key, str):
                    raise TypeError(f"a JSON object key must be a string, got {type(key)}")
                work.append(value)
                work.append(_Text(("," if i else "") + scalar.encode(key) + ":"))
            work.append(_Text("{"))
        elif isinstance(item, list | tuple):
            work.append(_Text("]"))
            for i in range(len(item) - 1, -1, -1):
                work.append(item[i])
                if i:
                    work.append(_Text(","))
            work.append(_Text("["))
        elif item is None or isinstance(item, str | int | float):
            out.append(scalar.encode(item))
        else:
            raise TypeError(f"cannot encode {type(item)} as JSON")
    return "".join(out).encode()


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


def loads_deep(data: bytes | str) -> Any:
    """Decode JSON of any nesting depth without recursion. Slow; only for what orjson
    refuses (nesting deeper than 1,024 levels).

    Raises:
        ValueError: ``data`` is not one JSON value; the message says where.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    scanstring = json.decoder.scanstring  # type: ignore[attr-defined]
    end = len(text)
    stack: list[Any] = []
    keys: list[str] = []

    def skip(pos: int) -> int:
        match = _WHITESPACE.match(text, pos)
        assert match is not None  # the pattern matches the empty string
        return match.end()

    def expect(pos: int, char: str) -> int:
        pos = skip(pos)
        if text[pos : pos + 1] != char:
            raise ValueError(f"expected {char!r} at character {pos} of the JSON text")
        return pos + 1

    def read_key(pos: int) -> int:
        pos = expect(pos, '"')
        key, pos = scanstring(text, pos)
        keys.append(key)
        return expect(pos, ":")

    pos = 0
    while True:
        # One value starts at pos (after whitespace).
        pos = skip(pos)
        char = text[pos : pos + 1]
        value: Any
        if char == "{":
            after = skip(pos + 1)
            if text[after : after + 1] == "}":
                value, pos = {}, after + 1
            else:
                stack.append({})
                pos = read_key(pos + 1)
                continue
        elif char == "[":
            after = skip(pos + 1)
            if text[after : after + 1] == "]":
                value, pos = [], after + 1
            else:
                stack.append([])
                pos += 1
                continue
        elif char == '"':
            value, pos = scanstring(text, pos + 1)
        else:
            for literal, meaning in _LITERALS:
                if text.startswith(literal, pos):
                    value, pos = meaning, pos + len(literal)
                    break
            else:
                number = _NUMBER.match(text, pos)
                if number is None:
                    raise ValueError(f"unexpected {char!r} at character {pos} of the JSON text")
                literal = number.group()
                value = float(literal) if number.group(1) or number.group(2) else int(literal)
                pos = number.end()
        # Hand the value to its container, closing containers that end here.
        while True:
            if not stack:
                if skip(pos) != end:
                    raise ValueError(f"extra data at character {skip(pos)} of the JSON text")
                return value
            parent = stack[-1]
            if isinstance(parent, list):
                parent.append(value)
            else:
                parent[keys.pop()] = value
            pos = skip(pos)
            char = text[pos : pos + 1]
            if char == ",":
                pos = read_key(pos + 1) if isinstance(parent, dict) else pos + 1
                break
            if char != ("]" if isinstance(parent, list) else "}"):
                raise ValueError(f"unexpected {char!r} at character {pos} of the JSON text")
            pos += 1
            value = stack.pop()
