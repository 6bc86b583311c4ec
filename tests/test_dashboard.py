"""`magrpo-dashboard --out`: the spec lands where asked, its folders created, and a path that
cannot be written is one line on stderr, exit 2."""

from __future__ import annotations

import json

from magrpo.dashboard import main


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
