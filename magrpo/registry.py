"""Classes chosen by name from the config (algorithms, tasks, feedback modes), as verl does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", bound=type)


def registrar(table: dict[str, type]) -> Callable[[str], Callable[[T], T]]:
    """`register = registrar(TABLE)`; then `@register("name")` stores the class under that name in
    TABLE and sets its `name` attribute, the key the config uses."""
    def register(name: str) -> Callable[[T], T]:
        def deco(cls: T) -> T:
            cls.name = name
            table[name] = cls
            return cls

        return deco

    return register
