"""Where in the user's code: the file and line an error came from, or a function was defined at, for
the one-line messages about code magrpo runs but did not write (a task's reward or `load()`, a reward
function, a plugin being imported, code that ended a run)."""

from __future__ import annotations

import inspect
import os
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from magrpo.core.schema import ConfigError, SetupError

_MAGRPO_DIR = Path(__file__).resolve().parents[1]   # the magrpo package
_LIBRARY_DIRS = tuple(dict.fromkeys(str(Path(p).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                                    if (p := sysconfig.get_paths().get(key))))


def first_line(e: BaseException) -> str:
    """The first line of an exception's message ("" for none): what a one-line error quotes of it."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def is_magrpo(obj: Any) -> bool:
    """Whether `obj` (a function, class or method) is defined in this package."""
    module = getattr(obj, "__module__", None) or ""
    return module == "magrpo" or module.startswith("magrpo.")


def shown_at(path: str, line: int | None) -> str:
    """`path:line`, the path relative to the working directory when it lies inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:          # another drive (Windows)
        rel = path
    return f"{path if rel.startswith('..') else rel}:{line}"


def defined_at(fn: Callable[..., Any]) -> str | None:
    """"file:line" of the definition of `fn` (a function or method), or None where it has no source."""
    try:
        fn = inspect.unwrap(fn)
        path = inspect.getsourcefile(fn)
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return None
    return shown_at(path, line) if path else None


def is_user_file(path: str) -> bool:
    """A file of the user's own code: not magrpo's, not Python's nor an installed library's."""
    if not path or path.startswith("<"):
        return False
    p = Path(path).resolve()
    if p.is_relative_to(_MAGRPO_DIR):
        return False
    if "site-packages" in p.parts or "dist-packages" in p.parts:
        return False
    return not any(str(p).startswith(d + os.sep) for d in _LIBRARY_DIRS)


def _frames(exc: BaseException) -> list[tuple[str, int]]:
    out, tb = [], exc.__traceback__
    while tb is not None:
        out.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return out


def raised_at(exc: BaseException, owner: Callable[..., Any] | None = None, prefer: Iterable[str] = ()) -> str | None:
    """"file:line" of the frame in the user's code where `exc` was raised: the deepest frame of its
    traceback in one of the folders `prefer` names (a plugin's own files, wherever it is installed),
    else in a file that is neither magrpo's nor Python's or an installed library's, else in the file
    that defines `owner` (a plugin installed as a package). None: raised elsewhere."""
    frames = _frames(exc)
    folders = [os.path.abspath(d) + os.sep for d in prefer]
    for path, line in reversed(frames):
        if folders and any(os.path.abspath(path).startswith(d) for d in folders):
            return shown_at(path, line)
    for path, line in reversed(frames):
        if is_user_file(path):
            return shown_at(path, line)
    try:
        own = inspect.getsourcefile(inspect.unwrap(owner)) if owner is not None else None
    except (OSError, TypeError):
        own = None
    if own and not is_magrpo(owner):
        for path, line in reversed(frames):
            if path == own:
                return shown_at(path, line)
    return None


def as_setup_error(fn: Callable[[], Any]) -> Any:
    """Run a set-up step; an unexpected exception becomes a SetupError that says what it was (the
    traceback is kept in summary.json)."""
    try:
        return fn()
    except (ConfigError, SetupError):
        raise
    except Exception as e:
        site = raised_at(e)         # the user's file and line (a task's load(), a plugin's code)
        raise SetupError(f"{type(e).__name__}: {e}" + (f" (at {site})" if site else "")) from e
