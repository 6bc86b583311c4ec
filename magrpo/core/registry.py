"""Things chosen by name from the config (algorithms, tasks, feedback modes, advantage estimators,
advantage scales, loss aggregations), as verl does: one mechanism for all of them.

    ALGOS = Registry("algorithm", "algo.name", builtins=("magrpo.algos.magrpo", ...))

    @ALGOS.register("my_algo")            # or register_algo("my_algo"), the public alias
    class MyAlgo: ...

    ALGOS["my_algo"]                      # a name nobody registered: RegistryError listing the known ones

A registry fills itself on its first lookup: it imports its built-in modules (each registers what
it defines), so a built-in name is known however the process started, not because some entry point
happened to import a module first. The user's plugins are imported by the entry points (every
command, `Experiment`, `validate` for `plugins=[...]`: magrpo.core.plugins.load_plugins), never by a
lookup: looking a name up imports nothing but the package's own modules. Registering a name that
another object already holds is an error naming both places; registering the same object again
(a module imported twice) is harmless.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from magrpo.core.schema import ConfigError, did_you_mean

T = TypeVar("T")


class RegistryError(KeyError, ConfigError):
    """A name no one registered (a ConfigError: one line, exit 2), or a name registered twice."""

    def __str__(self) -> str:       # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _where(obj: Any) -> str:
    """Where `obj` was defined: module.qualname (file:line)."""
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    try:
        return f"{name} ({inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]})"
    except (TypeError, OSError):
        return name


def _same(a: Any, b: Any) -> bool:
    """The same definition: the object itself, or one re-created by importing its module again."""
    return a is b or (getattr(a, "__module__", None) == getattr(b, "__module__", object())
                      and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", object()))


_BY_KEY: dict[str, Registry] = {}     # config key -> the registry whose names it takes


def names_of(key: str) -> list[str]:
    """The names the config key `key` may take (`algo.name`: the registered algorithms), sorted: a
    schema's choices read them here, without importing the layer that registers them."""
    registry = _BY_KEY.get(key)
    return sorted(registry) if registry is not None else []


class Registry(Mapping[str, T]):
    """name -> object, filled on first lookup (module docstring)."""

    def __init__(self, kind: str, key: str, builtins: tuple[str, ...] = (), set_name: bool = False):
        self.kind = kind                # "algorithm": the word in messages
        self.key = key                  # "algo.name": the config key that names an entry
        self.builtins = builtins        # modules that register the built-in entries
        self.set_name = set_name        # give a registered class its `name` (the key the config uses)
        self._items: dict[str, T] = {}
        self._filling = self._filled = self._builtins_in = False
        _BY_KEY[key] = self

    # -- registering -------------------------------------------------------------------------------
    def register(self, name: str, obj: T | None = None) -> Any:
        """`@registry.register("name")` over a class or function, or `registry.register("name", obj)`."""
        if not isinstance(name, str) or not name.strip():
            raise RegistryError(f"a {self.kind} is registered under a non-empty string, not {name!r}")

        def add(o: T) -> T:
            if not str(getattr(o, "__module__", "") or "").startswith("magrpo."):
                self._import_builtins()     # a plugin's name is checked against the built-in ones, whatever came first
            held = self._items.get(name)
            if held is not None and not _same(held, o):
                builtin = str(getattr(held, "__module__", "") or "").startswith("magrpo.")
                raise RegistryError(f"{self.key}={name!r} is registered twice: by {_where(held)}"
                                    f"{' (built in)' if builtin else ''} and by {_where(o)}; give "
                                    f"{'yours' if builtin else 'one of them'} another name")
            if self.set_name and isinstance(o, type):
                setattr(o, "name", name)       # noqa: B010  (the registered class's config name; T is any class)
            self._items[name] = o
            return o

        return add if obj is None else add(obj)

    def unregister(self, name: str) -> None:
        """Drop an entry (tests, notebooks re-defining a class under its name)."""
        self._items.pop(name, None)

    # -- filling -------------------------------------------------------------------------------------
    def fill(self) -> None:
        """Import the built-in modules once; a lookup calls this first."""
        if self._filled or self._filling:
            return
        self._filling = True
        try:
            self._import_builtins()
            self._filled = True
        finally:
            self._filling = False

    def _import_builtins(self) -> None:
        """Import the modules that register the built-in entries, once."""
        if self._builtins_in:
            return
        self._builtins_in = True
        try:
            for module in self.builtins:
                try:
                    importlib.import_module(module)
                except ModuleNotFoundError as e:    # an optional dependency of one family stays optional
                    if e.name != module:
                        raise
        except BaseException:
            self._builtins_in = False
            raise

    # -- looking up ----------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> T:
        if name not in self._items:
            self.fill()
        try:
            return self._items[name]
        except (KeyError, TypeError):
            known = sorted(self._items)
            raise RegistryError(f"{self.key}={name!r} is not a known {self.kind}; choose one of: {', '.join(known)}"
                                f"{did_you_mean(name, known)}") from None

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            self.fill()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self.fill()
        return iter(sorted(self._items, key=lambda name: self._rank(self._items[name])))

    def _rank(self, obj: Any) -> int:
        """Where an entry stands: those defined beside the registry first, then the built-in families
        in the order of `builtins` (whichever module happened to be imported first), then the plugins'
        entries, each group in the order it registered."""
        module = str(getattr(obj, "__module__", "") or "")
        if module in self.builtins:
            return self.builtins.index(module)
        prefixes = [b for b in self.builtins if module.startswith(b + ".")]
        if prefixes:
            return self.builtins.index(max(prefixes, key=len))
        return -1 if module.startswith("magrpo.") else len(self.builtins)

    def __len__(self) -> int:
        self.fill()
        return len(self._items)

    def names(self) -> list[str]:
        return sorted(self)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._items)})"


def registrar(table: Registry) -> Callable[[str], Callable[[T], T]]:
    """`register = registrar(REGISTRY)`: `@register("name")` is `@REGISTRY.register("name")`."""
    def register(name: str) -> Callable[[T], T]:
        return table.register(name)

    return register
