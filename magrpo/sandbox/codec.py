"""Plain data across the judge/candidate boundary, and the frames that carry it.

Only these types cross: None, bool, int, float, complex, str, bytes, and lists, tuples, dicts,
sets and frozensets of them. They travel as JSON, where every JSON object is a one-key tag:

    {"t": [...]} tuple    {"s": [...]} set    {"f": [...]} frozenset    {"d": [[k, v], ...]} dict
    {"c": [re, im]} complex    {"b": "<hex>"} bytes    {"i": "<hex>"} int beyond 64 bits

so decoding builds nothing but those types and runs no code of the sender's choosing (unlike
pickle). Anything else is refused with `UnsupportedValue`, naming the type.

The encoder runs in the candidate's process, where subclasses of the plain types (an `int` whose
`__eq__` always says yes, a `Counter`, a namedtuple) are reduced to their plain contents through
the base type's own methods: the value crosses, its behaviour does not. The decoder in the judge
trusts nothing: malformed JSON, unknown tags, unhashable set members or nesting too deep are a
`ValueError`.

Frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time

MAX_FRAME = 32 << 20  # bytes; a bigger value is refused (the judge decodes everything it reads)
_BIG = 1 << 63


class UnsupportedValue(TypeError):
    """A value that is not plain data (see the module docstring)."""


# -- encode ----------------------------------------------------------------------------------------


def encode(value) -> str:
    try:
        return json.dumps(_plain(value), separators=(",", ":"))
    except RecursionError:
        raise UnsupportedValue("the value nests too deeply (or contains itself)") from None


def _plain(x):
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if -_BIG < x < _BIG else {"i": format(x, "x")}
    if t is float:
        return x
    if t is list:
        return [_plain(v) for v in x]
    if t is tuple:
        return {"t": [_plain(v) for v in x]}
    if t is dict:
        return {"d": [[_plain(k), _plain(v)] for k, v in x.items()]}
    if t is set:
        return {"s": [_plain(v) for v in x]}
    if t is frozenset:
        return {"f": [_plain(v) for v in x]}
    if t is bytes:
        return {"b": x.hex()}
    if t is complex:
        return {"c": [x.real, x.imag]}
    return _plain(_base_value(x))


def _base_value(x):
    """The plain value inside an instance of a subclass of a plain type, read with the base
    type's methods so that nothing the subclass overrides takes part."""
    if isinstance(x, bool):
        return bool(int.__int__(x))
    if isinstance(x, int):
        return int.__int__(x)
    if isinstance(x, float):
        return float.__float__(x)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, bytes):
        return bytes.__bytes__(x)
    if isinstance(x, complex):
        return complex.__complex__(x)
    if isinstance(x, tuple):
        return tuple.__getitem__(x, slice(None))
    if isinstance(x, list):
        return list.copy(x)
    if isinstance(x, dict):
        return {k: v for k, v in dict.items(x)}
    if isinstance(x, frozenset):
        return frozenset.copy(x)
    if isinstance(x, set):
        return set.copy(x)
    if type(x).__module__ == "numpy" and hasattr(x, "item") and getattr(x, "shape", None) == ():
        item = x.item()  # numpy scalar -> the Python number it equals
        if type(item) in (bool, int, float, complex, str, bytes):
            return item
    raise UnsupportedValue(f"a value of type {type(x).__module__}.{type(x).__qualname__} is not plain data "
                           "(None, bool, int, float, complex, str, bytes, or lists, tuples, dicts, sets of them)")


# -- decode ----------------------------------------------------------------------------------------

_HASHABLE_TAGS = {"t", "f", "c", "b", "i"}


def decode(text: str | bytes):
    try:
        return json.loads(text, object_hook=_untag)
    except RecursionError:
        raise ValueError("the value nests too deeply") from None


def _untag(obj: dict):
    if len(obj) != 1:
        raise ValueError("malformed value: an object that is not a one-key tag")
    (tag, v), = obj.items()
    if tag == "t" and type(v) is list:
        return tuple(v)
    if tag == "d" and type(v) is list and all(type(p) is list and len(p) == 2 for p in v):
        try:
            return {k: val for k, val in v}
        except TypeError:
            raise ValueError("malformed value: unhashable dict key") from None
    if tag in ("s", "f") and type(v) is list:
        try:
            return set(v) if tag == "s" else frozenset(v)
        except TypeError:
            raise ValueError("malformed value: unhashable set member") from None
    if tag == "c" and type(v) is list and len(v) == 2 and all(type(p) in (int, float) for p in v):
        return complex(v[0], v[1])
    if tag == "b" and type(v) is str:
        return bytes.fromhex(v)
    if tag == "i" and type(v) is str and v.lstrip("-").isalnum():
        return int(v, 16)
    raise ValueError(f"malformed value: unknown tag {tag!r}")


# -- frames ----------------------------------------------------------------------------------------


class ChannelClosed(Exception):
    """The other end closed the channel (or broke the framing)."""


class ChannelTimeout(Exception):
    """No complete frame before the deadline."""


def write_frame(fd: int, payload: str | bytes) -> None:
    data = payload.encode("utf-8") if isinstance(payload, str) else payload
    if len(data) > MAX_FRAME:
        raise UnsupportedValue(f"the value is too large to send ({len(data)} bytes; the limit is {MAX_FRAME})")
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            raise ChannelClosed("the other end is gone") from None
        view = view[n:]


def read_frame(fd: int, deadline: float | None = None, extra_fds: tuple[int, ...] = ()) -> bytes:
    """One frame from `fd` (blocking until `deadline`, a time.monotonic() value; None = forever).
    If any of `extra_fds` becomes readable while nothing is pending on `fd`, ChannelClosed is
    raised (the judge passes the candidate's death notice there)."""
    header = _read_exact(fd, 4, deadline, extra_fds)
    (size,) = struct.unpack(">I", header)
    if size > MAX_FRAME:
        raise ChannelClosed(f"frame of {size} bytes is over the limit of {MAX_FRAME}")
    return _read_exact(fd, size, deadline, extra_fds)


def _read_exact(fd: int, size: int, deadline: float | None, extra_fds: tuple[int, ...]) -> bytes:
    chunks, got = [], 0
    while got < size:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise ChannelTimeout
        ready, _, _ = select.select([fd, *extra_fds], [], [], timeout)
        if not ready:
            raise ChannelTimeout
        if fd not in ready:
            raise ChannelClosed("the other end ended")
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other end closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
