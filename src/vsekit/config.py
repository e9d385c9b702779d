"""Typed configuration from plain data: :func:`from_dict` builds a (nested) dataclass from
a dict and names the field of any unknown key or wrongly typed value
(``train.lr: expected float``). Used by experiment configs and model bundles alike."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


class ConfigError(ValueError):
    pass


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        tagged = _kinds(args)
        if tagged and isinstance(value, dict):  # a tagged union: the "kind" key picks
            kind = value.get("kind", next(iter(tagged)))
            if kind not in tagged:
                raise ConfigError(f"{where}.kind: unknown {kind!r}; known: {sorted(tagged)}")
            return from_dict(tagged[kind], value, where)
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: expected {tp}, got {value!r}")
    if origin is list:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item, f"{where}[{k}]") for k, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:
            return float(value)  # YAML reads 2e-4 as a string
        except ValueError:
            pass
    if (
        tp in (int, str, bool, dict)
        and isinstance(value, tp)
        and not (tp is int and isinstance(value, bool))
    ):
        return value
    raise ConfigError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def _kinds(args: tuple) -> dict[str, type] | None:
    """``{kind: dataclass}`` when every member of a union is a dataclass with a string
    ``kind`` field default (model sections), else None."""
    out = {}
    for a in args:
        f = dataclasses.is_dataclass(a) and a.__dataclass_fields__.get("kind")
        if not f or not isinstance(f.default, str):
            return None
        out[f.default] = a
    return out


def from_dict(cls: type, d: Any, where: str = "config") -> Any:
    """Build dataclass ``cls`` from a nested dict; unknown keys and bad types raise."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(d).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}; known: {sorted(names)}")
    kwargs = {
        k: _coerce(v, hints[k], f"{where}.{k}" if where != "config" else k) for k, v in d.items()
    }
    return cls(**kwargs)
