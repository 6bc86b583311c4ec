"""`magrpo-dashboard --out`: the spec lands where asked, its folders created, and a path that
cannot be written is one line on stderr, exit 2."""

from __future__ import annotations

import json

from magrpo.cli.dashboard import main


def test_out_in_folders_that_do_not_exist_yet(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "new" / "deeper" / "dash.json"
    assert main(["--project", "magrpo", "--group", "g", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["project"] == "magrpo"
    assert f"wrote {out}" in capsys.readouterr().out


def test_default_out_without_a_login_is_written_in_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    assert main(["--project", "magrpo", "--group", "sweeps/g1"]) == 0   # a group name with a slash
    assert json.loads((tmp_path / "dashboard_sweeps" / "g1.json").read_text())["display_name"] == "magrpo sweeps/g1"
    capsys.readouterr()


def test_an_out_that_cannot_be_written_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "file").write_text("")
    for out in (tmp_path, tmp_path / "file" / "dash.json"):   # a directory; a folder that is a file
        assert main(["--project", "magrpo", "--group", "g", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cannot write the spec to {out}" in err, err


def test_make_dashboard_runs_the_command_and_says_what_it_needs(tmp_path):
    """`make dashboard` has a recipe: without PROJECT/GROUP it says what to give (exit 2), with them it
    writes the workspace spec."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    venv = Path(sys.executable).parent.parent
    base = ["make", "-s", "-C", str(repo), f"VENV={venv}", f"STAMP={tmp_path / 'stamp'}"]
    (tmp_path / "stamp").touch()             # the venv is set up: no install step in a test
    done = subprocess.run([*base, "dashboard"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "give PROJECT=" in done.stdout + done.stderr
    spec = tmp_path / "spec.json"
    done = subprocess.run([*base, "dashboard", "PROJECT=p", "GROUP=g", f"ARGS=--out {spec}"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(spec.read_text())
