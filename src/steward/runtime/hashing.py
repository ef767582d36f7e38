"""The ``pod-template-hash``: the name suffix of a Deployment's ReplicaSets and the label
that keeps their pods apart, computed exactly as kube-controller-manager computes it.

Upstream hashes (FNV-1a, 32 bits) a text dump of the Go value of the pod template — every
field of every struct in declaration order, with its Go type, zero values included — then
the collision count, and spells the number with a 27-letter alphabet. To produce the same
bytes from the API server's JSON this module walks the Go type layout of
``PodTemplateSpec`` recorded in ``podtemplate_schema.json`` (generated from k8s.io/api by
``tools/podschema``) and renders each value as that dump does.

# What is not exact
A few values have a Go representation the JSON does not determine: a non-null
``creationTimestamp`` inside the template, and resource quantities outside the API
server's canonical integer forms (``100m``, ``2``, ``1Gi``, ``500M`` … are exact). For
those :func:`pod_template_hash` falls back to hashing the template's canonical JSON (a
stable, valid name, but not upstream's) and says so with :class:`NotExact` from
:func:`go_dump`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import struct
from importlib import resources
from typing import Any

import orjson

log = logging.getLogger(__name__)

_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_MAX_INT64 = 2**63 - 1


class NotExact(ValueError):
    """The template holds a value whose Go form cannot be derived from its JSON."""


@functools.cache
def _schema() -> tuple[str, dict[str, Any]]:
    text = resources.files(__package__).joinpath("podtemplate_schema.json").read_text()
    data = json.loads(text)
    return data["root"], data["types"]


def fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits."""
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """Each character replaced by one of 27 consonants and digits (no vowels, so no
    words), as apimachinery's ``rand.SafeEncodeString``."""
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in text)


def pod_template_hash(template: dict[str, Any], collision_count: int | None = None) -> str:
    """The hash upstream gives this pod template (as the API server returns it) and
    ``status.collisionCount``."""
    try:
        data = go_dump(template).encode()
    except NotExact as err:
        log.warning("pod template hash not upstream's (%s): hashing its JSON instead", err)
        data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFF
    if collision_count is not None:
        # Eight bytes: the count as a little-endian uint32, then four zero bytes.
        for b in struct.pack("<I", collision_count & 0xFFFFFFFF) + bytes(4):
            h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFF
    return safe_encode(str(h))


def go_dump(template: dict[str, Any]) -> str:
    """The text upstream hashes for a PodTemplateSpec given as JSON.

    Raises:
        NotExact: see the module docs.
    """
    root, types = _schema()
    out: list[str] = []
    _Dumper(types, out).value(template, root, show_type=True)
    return "".join(out)


_QUANTITY = re.compile(r"^([+-]?)([0-9]+)([a-zA-Z]*)$")
_DEC_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def quantity_fields(text: str) -> dict[str, Any]:
    """A resource quantity's Go fields as apimachinery's ``ParseQuantity`` sets them, for
    its fast path (integer digits and a suffix).

    Raises:
        NotExact: any other form (fractions, huge values, …).
    """
    if text == "0":
        return {"value": 0, "scale": 0, "s": "0", "format": "DecimalSI"}
    m = _QUANTITY.match(text)
    if m is None:
        raise NotExact(f"quantity {text!r}")
    sign, num, suffix = m.groups()
    if len(num) > 1 and num.startswith("0"):
        raise NotExact(f"quantity {text!r}")
    value = int(num)
    keep = ""
    if suffix in _DEC_SUFFIX:
        fmt, scale = "DecimalSI", _DEC_SUFFIX[suffix]
        precision = 18 - len(num)
        result = value
        if scale % 3 == 0 and not num.endswith("000") and num[0] != "0":
            keep = text
    elif suffix in _BIN_SUFFIX:
        fmt, scale, exponent = "BinarySI", 0, _BIN_SUFFIX[suffix]
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        result = value << exponent
        if exponent % 10 == 0 and value & 0x07 != 0:
            keep = text
    elif len(suffix) > 1 and suffix[0] in "eE" and suffix[1:].lstrip("+-").isdigit():
        fmt, scale = "DecimalExponent", int(suffix[1:])
        precision = 18 - len(num)
        result = value
        if scale % 3 == 0 and not num.endswith("000") and num[0] != "0":
            keep = text
    else:
        raise NotExact(f"quantity {text!r}")
    if precision < 0 or scale < -9 or result > _MAX_INT64:
        raise NotExact(f"quantity {text!r}")
    return {"value": -result if sign == "-" else result, "scale": scale, "s": keep, "format": fmt}


class _Dumper:
    """go-spew's ``%#v`` (types shown, methods off, map keys sorted, no addresses)."""

    def __init__(self, types: dict[str, Any], out: list[str]) -> None:
        self.types = types
        self.out = out

    def value(self, v: Any, tname: str, *, show_type: bool, go_names: bool = False) -> None:
        """Render ``v`` of Go type ``tname``; ``go_names``: ``v`` is keyed by Go field
        names (the values built for special types), not by JSON names."""
        info = self.types[tname]
        kind = info["kind"]
        w = self.out.append
        if kind == "ptr":
            if v is None:
                w(f"({tname})<nil>" if show_type else "<nil>")
                return
            w(f"({tname})" if show_type else "<*>")
            self.value(v, info["elem"], show_type=False, go_names=go_names)
            return
        if show_type:
            w(f"({tname})")
        special = _SPECIAL.get(tname)
        if special is not None:
            self.struct(special(v), info, go_names=True)
            return
        if kind == "struct":
            self.struct(v or {}, info, go_names=go_names)
        elif kind == "bool":
            w("true" if v else "false")
        elif kind.startswith(("int", "uint")):
            w(str(int(v or 0)))
        elif kind == "string":
            w("" if v is None else str(v))
        elif kind == "slice":
            if not v:
                w("<nil>")
                return
            if info["elem"] == "uint8":
                raise NotExact("byte slice")
            w("[")
            for i, item in enumerate(v):
                if i:
                    w(" ")
                self.value(item, info["elem"], show_type=False)
            w("]")
        elif kind == "map":
            if not v:
                w("<nil>")
                return
            w("map[")
            for i, key in enumerate(sorted(v)):
                if i:
                    w(" ")
                self.value(key, info["key"], show_type=False)
                w(":")
                self.value(v[key], info["elem"], show_type=False)
            w("]")
        else:
            raise NotExact(f"Go kind {kind} ({tname})")

    def struct(self, v: dict[str, Any], info: dict[str, Any], *, go_names: bool) -> None:
        w = self.out.append
        w("{")
        for i, f in enumerate(info.get("fields") or ()):
            if i:
                w(" ")
            w(f["name"])
            w(":")
            ftype = f["type"]
            if go_names:
                fv = v.get(f["name"])
            elif not f["json"] and self.types[ftype]["kind"] == "struct":
                fv = v  # an embedded struct: its fields are inline in the JSON
            elif f["json"] in ("", "-"):
                fv = None
            else:
                fv = v.get(f["json"])
            self.value(fv, ftype, show_type=True, go_names=go_names)
        w("}")


def _time(v: Any) -> dict[str, Any]:
    if v is not None:
        raise NotExact(f"timestamp {v!r} in the template")
    return {"Time": {"wall": 0, "ext": 0, "loc": None}}


def _quantity(v: Any) -> dict[str, Any]:
    if v is None:
        return {"i": {"value": 0, "scale": 0}, "d": {"Dec": None}, "s": "", "Format": ""}
    q = quantity_fields(str(v))
    return {
        "i": {"value": q["value"], "scale": q["scale"]},
        "d": {"Dec": None},
        "s": q["s"],
        "Format": q["format"],
    }


def _int_or_string(v: Any) -> dict[str, Any]:
    if isinstance(v, str):
        return {"Type": 1, "IntVal": 0, "StrVal": v}
    return {"Type": 0, "IntVal": int(v or 0), "StrVal": ""}


_SPECIAL = {
    "v1.Time": _time,
    "resource.Quantity": _quantity,
    "intstr.IntOrString": _int_or_string,
}
