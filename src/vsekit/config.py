"""Typed configuration from plain data, validated by pydantic: :func:`from_dict` builds a
(nested) dataclass from a dict and names the field of any unknown key or wrongly typed
value in one line (``train.lr: expected float, got 'abc'``). Used by experiment configs
and model bundles alike.

Config sections stay plain dataclasses; pydantic validates them (lax: YAML's ``2e-4``,
a string, is a float), forbids unknown keys, and tells the kinds of a section apart
by their ``kind`` field through :func:`tagged` (a discriminated union whose missing
``kind`` means the first kind).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Annotated, Any, Union

from pydantic import ConfigDict, Discriminator, Tag, TypeAdapter, ValidationError


class ConfigError(ValueError):
    pass


_FORBID = ConfigDict(extra="forbid")
_TAGS: dict[str, type] = {}  # every kind tag -> its dataclass (to name fields in errors)


def tagged(*classes: type) -> Any:
    """The union of config dataclasses ``classes`` told apart by their ``kind`` field's
    default; a mapping without ``kind`` is the first class."""
    kinds = [c.__dataclass_fields__["kind"].default for c in classes]
    first = kinds[0]

    def kind_of(v: Any) -> str | None:
        return v.get("kind", first) if isinstance(v, dict) else getattr(v, "kind", None)

    _TAGS.update(zip(kinds, classes, strict=True))
    members = tuple(Annotated[c, Tag(k)] for c, k in zip(classes, kinds, strict=True))
    return Annotated[Union[members], Discriminator(kind_of)]  # noqa: UP007


def _forbid_extra(tp: Any, seen: set) -> None:
    """Give every dataclass reachable from ``tp`` pydantic's ``extra="forbid"``."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if tp in seen:
            return
        seen.add(tp)
        if "__pydantic_config__" not in tp.__dict__:
            tp.__pydantic_config__ = _FORBID
        for hint in typing.get_type_hints(tp, include_extras=True).values():
            _forbid_extra(hint, seen)
        return
    for arg in typing.get_args(tp):
        _forbid_extra(arg, seen)


@functools.cache
def _adapter(tp: Any) -> TypeAdapter:
    _forbid_extra(tp, set())
    return TypeAdapter(tp)


def _strip(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without ``| None`` (an optional section is its
    section; a union of several sections stays as it is)."""
    while True:
        if typing.get_origin(tp) is Annotated:
            tp = typing.get_args(tp)[0]
            continue
        if typing.get_origin(tp) in (Union, types.UnionType):
            rest = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(rest) == 1:
                tp = rest[0]
                continue
        return tp


def _field_type(tp: Any, key: Any) -> Any:
    """The type found under ``key`` (a field, a list index or a kind tag) of ``tp``."""
    tp = _strip(tp)
    if isinstance(key, str) and key in _TAGS and typing.get_origin(tp) is Union:
        return _TAGS[key]
    if isinstance(key, int):
        args = typing.get_args(tp)
        return args[0] if args else Any
    if dataclasses.is_dataclass(tp):
        return typing.get_type_hints(tp, include_extras=True).get(key, Any)
    return Any


_EXTRA = ("extra_forbidden", "unexpected_keyword_argument")  # an unknown key
_EXPECTED = {"float": "float", "int": "int", "string": "str", "bool": "bool", "list": "a list",
             "dict": "a mapping", "dataclass": "a mapping", "model": "a mapping"}  # fmt: skip


def _one_line(e: ValidationError, root: Any, where: str) -> str:
    """The first error of ``e`` as ``field.path: what is wrong``."""
    errs = e.errors(include_url=False)
    err = errs[0]
    extra = err["type"] in _EXTRA
    path, tp = [], root
    for key in err["loc"][:-1] if extra else err["loc"]:
        nxt = _field_type(tp, key)
        if not (isinstance(key, str) and key in _TAGS and nxt is _TAGS[key]):
            path.append(f"[{key}]" if isinstance(key, int) else key)
        tp = nxt
    prefix = ".".join([*([] if where == "config" else [where]), *path]).replace(".[", "[")
    prefix = prefix or where
    if extra:
        parent = err["loc"][:-1]
        unknown = sorted(str(x["loc"][-1]) for x in errs
                         if x["type"] in _EXTRA and x["loc"][:-1] == parent)  # fmt: skip
        tp = _strip(tp)
        fields = dataclasses.fields(tp) if dataclasses.is_dataclass(tp) else ()
        known = sorted(f.name for f in fields)
        return f"{prefix}: unknown field(s) {unknown}; known: {known}"
    if err["type"] == "union_tag_invalid":
        return f"{prefix}.kind: unknown {err['input'].get('kind')!r}; known: {sorted(_TAGS)}"
    kind = err["type"].split("_")[0]
    if kind in _EXPECTED:
        return f"{prefix}: expected {_EXPECTED[kind]}, got {err['input']!r}"
    return f"{prefix}: {err['msg']}"


def from_dict(cls: Any, d: Any, where: str = "config") -> Any:
    """Build ``cls`` (a config dataclass, or a :func:`tagged` union) from a nested dict;
    unknown keys and bad types raise :class:`ConfigError` naming the field."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(d).__name__}")
    try:
        out = _adapter(cls).validate_python(d)
    except ValidationError as e:
        raise ConfigError(_one_line(e, cls, where)) from None
    _no_silent_coercion(d, out, "" if where == "config" else where)
    return out


def _no_silent_coercion(given: Any, got: Any, where: str) -> None:
    """Refuse what lax validation would turn into something else: a boolean into a
    number, or text into anything but text or a float (YAML reads ``2e-4`` as text)."""
    if isinstance(given, dict):
        for k, v in given.items():
            sub = got.get(k) if isinstance(got, dict) else getattr(got, k, None)
            _no_silent_coercion(v, sub, f"{where}.{k}" if where else str(k))
    elif isinstance(given, list | tuple) and isinstance(got, list | tuple):
        for k, (v, sub) in enumerate(zip(given, got, strict=False)):
            _no_silent_coercion(v, sub, f"{where}[{k}]")
    else:
        kept = (
            (bool,) if isinstance(given, bool) else (str, float) if isinstance(given, str) else None
        )
        if kept and not isinstance(got, kept):
            raise ConfigError(f"{where}: expected {type(got).__name__}, got {given!r}")
