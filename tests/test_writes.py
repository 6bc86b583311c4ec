"""magrpo.writes: a full disk recognised in every form the libraries raise it, and the hidden
temporary directories of writes that were killed (tests of the commands that use it live with
the commands: test_team_export, test_crossplay, test_table, test_failures)."""

from __future__ import annotations

import errno
import os

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from magrpo.schema import SetupError
from magrpo.writes import DiskFullError, disk_full, disk_full_error
from tests.conftest import small_tmpfs


def _chained(outer: BaseException, inner: BaseException, cause: bool) -> BaseException:
    if cause:
        outer.__cause__ = inner
    else:
        outer.__context__ = inner
    return outer


ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "agent_1/model.safetensors")
FULL = [
    (ENOSPC, "no space left on device"),
    (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "disk quota exceeded"),
    # safetensors >= 0.5 and the older Debug form of Rust's io::Error
    (SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
     "no space left on device"),
    (SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on '
                     'device" })'), "no space left on device"),
    # torch.save on a full disk: the zip writer's check, raised while handling the stream's error
    (_chained(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),
              RuntimeError("basic_ios::clear: iostream error"), cause=False), "torch.save: unexpected pos 576 vs 534"),
    (RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"),
     "torch.save: PytorchStreamWriter failed writing file data/0: file write failed"),
    # the errno deeper in the chain
    (_chained(RuntimeError("could not save the model"), ENOSPC, cause=True), "no space left on device"),
    (_chained(ValueError("while writing"), _chained(KeyError("x"), ENOSPC, cause=False), cause=True),
     "no space left on device"),
]
NOT_FULL = [OSError(errno.EACCES, os.strerror(errno.EACCES)), OSError("disk full"), RuntimeError("CUDA out of memory"),
            ValueError("unexpected position 28"), SafetensorError("Error while serializing: dtype mismatch")]


@pytest.mark.parametrize("exc,why", FULL, ids=range(len(FULL)))
def test_a_full_disk_is_recognised_in_every_form(exc, why, tmp_path):
    assert disk_full(exc) == why
    err = disk_full_error(exc, tmp_path / "runs" / "checkpoints", "step_4")
    assert isinstance(err, DiskFullError) and isinstance(err, SetupError)      # exit 1, as a setup error
    text = str(err)
    assert "\n" not in text
    assert text.startswith(f"the disk is full at {tmp_path / 'runs' / 'checkpoints'}: writing step_4 failed ({why}; ")
    assert "free there)" in text and "free some space or write elsewhere" in text


@pytest.mark.parametrize("exc", NOT_FULL, ids=range(len(NOT_FULL)))
def test_other_write_failures_are_not_called_a_full_disk(exc, tmp_path):
    assert disk_full(exc) is None and disk_full_error(exc, tmp_path, "x") is None


def test_a_chain_that_loops_ends(tmp_path):
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert disk_full(a) is None


def test_the_libraries_own_errors_on_a_really_full_disk(tmp_path):
    """What safetensors and torch.save raise when a (1 MiB tmpfs) disk fills up, as they are."""
    with small_tmpfs(tmp_path / "small", "1m") as disk:
        big = {"w": torch.zeros(1 << 19)}           # 2 MiB of float32
        with pytest.raises(Exception) as e:
            save_file(big, str(disk / "a.safetensors"))
        assert disk_full(e.value) == "no space left on device", repr(e.value)
        for f in disk.iterdir():
            f.unlink()
        with pytest.raises(Exception) as e:
            torch.save(big, disk / "b.pt")
        assert disk_full(e.value) is not None, repr(e.value)
        for f in disk.iterdir():
            f.unlink()
        with pytest.raises(OSError) as e:
            (disk / "c.txt").write_bytes(b"x" * (2 << 20))
        assert disk_full(e.value) == "no space left on device"
