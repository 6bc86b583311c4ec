"""What runs inside the confined candidate process.

Two bodies, both entered after isolation.launch has confined the process:

* `serve` (tests): exec the setup and the candidate's code in a fresh module, say "ready" (or why
  not) on the reply pipe, then answer calls from the judge: each request names a function of
  that module and carries plain-data arguments; the reply carries the plain-data return value,
  or the exception's type name and message. Nothing here decides whether a test passed.
* `run_script` (run_program): exec the code as a script and report on a record pipe whether it
  ran to its end. Those records are the program's own word (it can write them itself): they are
  for running code, never for judging it.

Frames and values: see codec.py. Requests are `["call", n, name, args, kwargs]`; replies are
`["ok", n, value]`, `["raise", n, type name, message]` or `["unsupported", n, why]`.
"""

from __future__ import annotations

import atexit
import json
import linecache
import os
import sys
import threading
import traceback
import types

from magrpo.sandbox import codec

MSG_CHARS = 300  # an error message is cut to this many characters


def describe(exc: BaseException) -> str:
    """'Type: first line of the message' (just 'Type' when there is no message)."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # a hostile __str__
        lines = []
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:MSG_CHARS]


def source(code: str, filename: str):
    # Registered so tracebacks show the offending lines; mtime None keeps checkcache() away.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    return compile(code, filename, "exec")


# -- tests: load, then answer calls ----------------------------------------------------------------


def serve(setup: str, code: str, req_fd: int, reply_fd: int) -> int:
    module = types.ModuleType("__candidate__")
    ns = module.__dict__
    for text, filename, label in ((setup, "setup.py", "setup code: "), (code, "candidate.py", "")):
        try:
            exec(source(text, filename), ns)
        except BaseException as e:  # noqa: B036 - SystemExit while loading is a failure too
            codec.write_frame(reply_fd, json.dumps(["load_error", label + describe(e)]))
            return 0
    codec.write_frame(reply_fd, json.dumps(["ready"]))
    while True:
        try:
            request = codec.decode(codec.read_frame(req_fd))
        except (codec.ChannelClosed, ValueError):
            return 0  # the judge is done with us
        n, name, args, kwargs = request[1:5]
        codec.write_frame(reply_fd, _answer(ns, n, name, args, kwargs))


def _answer(ns: dict, n: int, name: str, args: tuple, kwargs: dict) -> str:
    try:
        try:
            fn = ns[name]
        except KeyError:
            raise NameError(f"name {name!r} is not defined") from None
        result = fn(*args, **kwargs)
    except BaseException as e:  # noqa: B036 - the judge decides what an exception means
        try:
            message = str(e).strip().splitlines()[0][:MSG_CHARS] if str(e).strip() else ""
        except Exception:
            message = ""
        return json.dumps(["raise", n, type(e).__name__, message])
    try:
        reply = f'["ok",{n},{codec.encode(result)}]'
        if len(reply) > codec.MAX_FRAME:
            raise codec.UnsupportedValue(f"the return value is too large to send ({len(reply)} bytes)")
        return reply
    except codec.UnsupportedValue as e:
        return json.dumps(["unsupported", n, f"returned {e}"])
    except Exception as e:  # noqa: BLE001 - e.g. MemoryError while encoding
        return json.dumps(["unsupported", n, f"the return value could not be encoded: {describe(e)}"])


# -- run_program: a script -------------------------------------------------------------------------


def run_script(code: str, run_name: str, files: dict[str, str], record_fd: int) -> int:
    def emit(record: dict) -> None:
        try:
            os.write(record_fd, (json.dumps(record) + "\n").encode())
        except OSError:
            pass

    for name, text in files.items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "w", encoding="utf-8") as f:
            f.write(text)
    module = types.ModuleType(run_name)
    module.__file__ = "program.py"
    if run_name == "__main__":
        sys.modules["__main__"] = module  # so pickling and introspection see the program as __main__
    sys.argv = ["program.py"]
    try:
        exec(source(code, "program.py"), module.__dict__)
    except SystemExit as e:
        return _finish(_exit_code(e))  # script semantics for the exit code; "finished" is not said
    except BaseException as e:  # noqa: B036
        emit({"exception": describe(e)})
        try:
            # Skip this frame: the traceback starts in the program, as for a plain script.
            traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        except Exception:
            pass
        return _finish(1)
    emit({"finished": True})
    return _finish(0)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _finish(code: int) -> int:
    """What interpreter shutdown would do: join threads, run atexit handlers, flush."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # CPython's private shutdown hook, not in typeshed
    except BaseException:  # noqa: B036
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: B036
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B036
            pass
    return code
