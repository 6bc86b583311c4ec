"""magrpo.core.writes: a full disk recognised in every form the libraries raise it, and the hidden
temporary directories of writes that were killed (tests of the commands that use it live with
the commands: test_team_export, test_crossplay, test_table, test_failures)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from magrpo.core.schema import ConfigError, SetupError
from magrpo.core.writes import HOST, DiskFullError, disk_full, disk_full_error
from tests.conftest import small_tmpfs, tree_digest


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


# -- temporary directories of writes that were killed ------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _temp(parent: Path, name: str, pid: int, host: str = HOST, tag: str = "ab12_c") -> Path:
    d = parent / f".{name}.{pid}-{host}.{tag}.tmp"
    (d / "agent_1").mkdir(parents=True)
    (d / "agent_1" / "model.safetensors").write_bytes(b"\0" * 32)      # a write cut short: no manifest
    return d


def test_a_write_removes_the_stale_temporary_directories_of_its_destination_only(tmp_path):
    from magrpo.core.checkpoint import write_checkpoint

    dead = _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = _temp(tmp_path, "team", dead)
        kept = [_temp(tmp_path, "team", live.pid, tag="live"),             # still writing
                _temp(tmp_path, "team", dead, host="0badc0de"),            # another host's: its pid means nothing here
                _temp(tmp_path, "other", dead),                            # another destination's
                _temp(tmp_path, "team", dead + 1 if dead + 1 != live.pid else dead + 2, tag="mid")]
        mid_pid = int(kept[-1].name.split(".")[2].split("-")[0])
        (tmp_path / f".team.old-{mid_pid}").mkdir()                       # caught between its two renames
        (tmp_path / ".team.notes.tmp").mkdir()                            # not named by magrpo: not its to remove
        (tmp_path / ".team.notes.tmp" / "mine.txt").write_text("mine")
        before = {d.name: tree_digest(d) for d in tmp_path.iterdir() if d != stale}

        write_checkpoint(tmp_path / "team", lambda d: (d / "x.txt").write_text("x"), 0, None)
        assert not stale.exists()
        assert {d.name: tree_digest(d) for d in tmp_path.iterdir() if d.name != "team"} == before
        assert all(d.exists() for d in kept)
        assert sorted(p.name for p in (tmp_path / "team").iterdir()) == ["manifest.json", "x.txt"]
    finally:
        live.kill()
        live.wait()


def test_a_checkpoint_save_removes_what_a_killed_save_of_any_step_left(tmp_path):
    from magrpo.core import checkpoint

    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    ckpts.mkdir(parents=True)
    dead = _dead_pid()
    stale = _temp(ckpts, "step_1", dead)
    (stale / "trainer_state.pt").write_bytes(b"PK")
    # a killed save is never taken for a checkpoint: not among the run's steps, refused when named
    with pytest.raises(ConfigError, match="neither a checkpoint"):
        checkpoint.resolve(run, "resume")
    with pytest.raises(ConfigError, match="temporary directory of a save that did not finish"):
        checkpoint.resolve(stale, "resume")
    checkpoint.write_checkpoint(ckpts / "step_2", lambda d: (d / checkpoint.STATE_FILE).write_bytes(b"state"), 2, {})
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_2"]
    assert checkpoint.resolve(run, "resume") == ckpts / "step_2"


def test_a_temporary_directory_is_never_loaded_as_a_team(tmp_path):
    from magrpo.team.team import Team

    d = _temp(tmp_path, "team", _dead_pid())
    (d / "team.json").write_text("{}")
    (d / "manifest.json").write_text('{"files": {}}')       # even one cut short after its manifest
    with pytest.raises(ConfigError, match="temporary directory of an export that did not finish"):
        Team.from_pretrained(d)


def test_publish_removes_its_own_stale_stage_only(tmp_path):
    from magrpo.core.writes import STAGE, publish

    out = tmp_path / "out"
    out.mkdir()
    stale = _temp(out, STAGE, _dead_pid())
    other = _temp(out, "mine", _dead_pid())
    written = publish(out, lambda stage: (stage / "a.md").write_text("a"), force=False)
    assert written == [out / "a.md"] and not stale.exists() and other.exists()
    assert sorted(p.name for p in out.iterdir()) == sorted(["a.md", other.name])
