"""Whether the Hugging Face hub can be reached, decided once per process.

Without it, every hub model or dataset a config names would be retried file by file (tens of
seconds and a screen of warnings) before failing. `ensure_mode()` is called before the first hub
load: when `HF_HUB_OFFLINE=1` is set, or one connection attempt to the hub's endpoint fails within
a few seconds, the hub libraries are switched to their offline mode, so a model or data set in
the local cache still loads and anything else fails at once with one line (`unreachable_hint`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from urllib.parse import urlparse

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
_state: dict[str, str | None] = {}


def is_repo_id(text: str) -> bool:
    """Whether `text`, which names no existing path here, reads as a hub repo id `owner/name` rather
    than a local path: one "/", not starting with ".", "/" or "~", and its owner no directory here
    (beside an existing `teams/`, `teams/nope` is a mistyped folder, not a repo of user "teams")."""
    owner, slash, name = text.partition("/")
    return (bool(slash) and bool(owner) and bool(name) and "/" not in name and not text.startswith((".", "/", "~"))
            and not os.path.isdir(owner))


def _probe(endpoint: str, timeout: float) -> str | None:
    """None when a TCP connection to the endpoint opens within `timeout`, else why not."""
    url = urlparse(endpoint)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    result: list[str | None] = [f"no answer within {timeout:.0f} s"]

    def connect() -> None:     # in a thread: name resolution has no timeout of its own
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result[0] = None
        except OSError as e:
            result[0] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return result[0]


def offline_reason() -> str | None:
    """Why the hub is out of reach (HF_HUB_OFFLINE, or the failed probe), or None when it is
    reachable. Probed once per process."""
    if "reason" not in _state:
        if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
            _state["reason"] = "HF_HUB_OFFLINE is set"
        else:
            from huggingface_hub import constants  # noqa: PLC0415  effects: huggingface_hub reads HF_HUB_OFFLINE and its endpoint when first imported

            why = _probe(constants.ENDPOINT, PROBE_TIMEOUT_S)
            _state["reason"] = None if why is None else f"the hub cannot be reached ({why})"
    return _state["reason"]


def ensure_mode() -> bool:
    """Put the hub libraries in offline mode when the hub is out of reach; True when offline."""
    reason = offline_reason()
    if reason is None:
        return False
    if not _state.get("switched"):
        import datasets.config  # noqa: PLC0415  start-up: datasets loads only for a dataset read from the hub or a file
        import huggingface_hub.constants  # noqa: PLC0415  effects: as in offline_reason

        huggingface_hub.constants.HF_HUB_OFFLINE = True
        datasets.config.HF_HUB_OFFLINE = True
        os.environ["HF_HUB_OFFLINE"] = "1"          # for processes started from this one
        _state["switched"] = "yes"
        log.info("offline: %s; hub models and data sets load from the local cache only", reason)
    return True


def unreachable_hint(kind: str, hub_id: str, key: str, config_name: str | None = None) -> str:
    """The one line for a hub model or dataset that is neither reachable nor cached; a dataset's
    `config_name` (mbpp's "sanitized") is part of the command it gives."""
    reason = offline_reason() or "the hub is out of reach"
    subset = f", {config_name!r}" if config_name else ""
    fetch = (f"hf download {hub_id} --local-dir DIR" if kind == "model" else
             f"python -c \"import datasets; datasets.load_dataset({hub_id!r}{subset}).save_to_disk('DIR')\"")
    return (f"{kind} {hub_id!r} is not in the local cache and {reason}; on a machine with a network run "
            f"`{fetch}`, copy DIR here and set {key}=DIR (docs/install.md, 'Offline')")


@contextlib.contextmanager
def quiet_bars(library: str):
    """No progress bar from `library` ("transformers" or "datasets") inside the block: a model load
    or a small local file draws one per call ("Loading weights", "Generating train split"), noise in a
    log and in a notebook. The library's own setting is put back after (a user who wants bars keeps
    them elsewhere)."""
    if library == "transformers":
        from transformers.utils import logging as lib  # noqa: PLC0415  start-up: transformers loads only where a model does

        on, off, is_on = lib.enable_progress_bar, lib.disable_progress_bar, lib.is_progress_bar_enabled
    else:
        import datasets  # noqa: PLC0415  start-up: datasets loads only for a dataset read from the hub or a file

        on, off, is_on = (datasets.enable_progress_bars, datasets.disable_progress_bars,
                          datasets.is_progress_bar_enabled)
    was = is_on()
    off()
    try:
        yield
    finally:
        if was:
            on()
