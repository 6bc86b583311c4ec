"""The package's commands as processes of their own, without paying their imports each time.

A test that runs `python -m magrpo.cli.train ...` wants what a user gets: a process of its own, with
its own environment, working directory, exit code, stdout and stderr, and nothing it does left in
the test runner. A fresh interpreter spends most of a small command's time importing torch,
transformers and Hydra (about 6 of the 8-12 s of a smoke run here). `run` forks each command from
a server process that imported those libraries once (multiprocessing's forkserver, single-threaded,
which imports and never computes): the child is still a process of its own, with the given
environment (set before the command's module is imported), directory, argv and file descriptors,
and its exit status is the command's. What differs from a fresh interpreter: the preloaded
libraries read their import-time environment variables once, in the server, and the warnings they
print while importing are not printed again. Tests of those, of signals sent to a command, of
installation, and of sweeps through the joblib launcher (whose worker pool, started from such a
child, lingers for minutes at its shutdown) start a real interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Libraries every command imports, heaviest first. None of the package's command modules is here:
# each is imported in the child, after its environment is in place.
PRELOAD = ["magrpo.core.process", "torch", "transformers", "transformers.modeling_utils",
           "transformers.models.qwen2.modeling_qwen2", "transformers.models.llama.modeling_llama",
           "hydra", "omegaconf", "hydra._internal.hydra", "peft"]

_context = None
# The server imports under the environment the test session started with, not under whatever a
# test has patched in by the time the first command runs (libraries read some of it at import).
_SESSION_ENV = dict(os.environ)


def _server():
    global _context
    if _context is None:
        import multiprocessing.forkserver

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        now = dict(os.environ)
        os.environ.clear()
        os.environ.update(_SESSION_ENV)
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(now)
        _context = ctx
    return _context


def _child(module: str, prog: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str,
           script: bool) -> None:
    """In the forked process: the command's environment, directory, argv, import path and output
    files, then its main."""
    import importlib
    import shutil

    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    # As a fresh interpreter starts: `python -m` puts the working directory first, a console script
    # its own directory; then PYTHONPATH. The server's '' (the directory it started in) goes.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = os.path.dirname(shutil.which(prog, path=env.get("PATH")) or sys.executable) if script else cwd
    sys.path[:] = [first, *extra, *(p for p in sys.path if p and p != first and p not in extra)]
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.argv = [prog, *args]
    code = 0
    try:
        result = importlib.import_module(module).main()
        code = result if isinstance(result, int) else 0
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    import atexit

    atexit._run_exitfuncs()        # what the interpreter runs on its way out; multiprocessing's
    sys.stdout.flush()             # finalizers (semaphores, the resource tracker) run after this
    sys.stderr.flush()
    raise SystemExit(code)


def run(module: str, args: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300, script: str | None = None) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS`, or with `script` that console script (whose main is MODULE's), as a
    process: a CompletedProcess with its return code, stdout and stderr as text, as
    `subprocess.run(..., capture_output=True, text=True)` gives."""
    env = dict(os.environ if env is None else env)
    cwd = str(cwd if cwd is not None else os.getcwd())
    with tempfile.TemporaryDirectory(prefix="preloaded-") as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        proc = _server().Process(target=_child, args=(module, script or module, list(args), cwd, env, out, err,
                                                      script is not None))
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired([module, *args], timeout)
        text = [Path(f).read_text(errors="replace") if os.path.exists(f) else "" for f in (out, err)]
        return subprocess.CompletedProcess([sys.executable, "-m", module, *args], proc.exitcode, *text)


def script(name: str, args: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    """The installed console script `name` (magrpo-train, magrpo-export, ...) as `run` runs a module:
    its entry point's module, the script's own directory first on the import path."""
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="console_scripts", name=name)]
    module, _, attr = entry.value.partition(":")
    assert attr == "main", f"{name}: {entry.value} (run calls a module's main)"
    return run(module, args, cwd=cwd, env=env, timeout=timeout, script=name)
