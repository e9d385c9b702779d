"""One small registry type behind every pluggable family (backbones, dataset sources,
text encoders, similarities, losses): ``@REG.register(name)``, ``REG.names()``,
``REG.get(name)`` with an error that lists the known names."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """``modules``: the modules that register members; they are imported on the first
    lookup, so the registry is complete whatever the caller imported before."""

    def __init__(self, kind: str, modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._modules = modules
        self._loaded = not modules

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for m in self._modules:
                importlib.import_module(m)

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self._items[name] = obj
            return obj

        return deco

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._items

    def get(self, name: str) -> T:
        self._load()
        if name not in self._items:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._items[name]
