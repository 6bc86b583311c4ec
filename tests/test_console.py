"""What the console shows in the first hour: no progress bars from the libraries underneath for a
model load or a small data file, and the same progress and log from Python as from the command line."""

from __future__ import annotations

import json

from tests.conftest import compose_cfg


def test_loading_a_team_draws_no_library_progress_bars(tmp_path, capfd):
    from magrpo.team import Team
    from magrpo.train import run

    run(compose_cfg([f"output_dir={tmp_path / 'r'}", "debug=smoke", "task=agree"]))
    capfd.readouterr()
    team = Team.from_run(tmp_path / "r")
    out, err = capfd.readouterr()
    assert team.num_agents == 2
    assert "Loading weights" not in err + out and "it/s" not in err + out, err


def test_a_tasks_data_file_loads_without_a_progress_bar(tmp_path, capfd):
    """What task.data.path names (tldr, arxiv, your own file) is read by `datasets`, quietly."""
    rows = [{"prompt": f"Text number {k} about the sea and the sky.", "completion": "A summary."} for k in range(4)]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from magrpo.tasks.data import load_local

    capfd.readouterr()
    got = load_local(path, "train")
    out, err = capfd.readouterr()
    assert len(got) == 4
    assert "Generating" not in err + out and "%|" not in err, err
