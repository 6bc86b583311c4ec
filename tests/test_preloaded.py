"""tests.preloaded: a command forked from a server that imported its libraries is still a process of
its own: its environment, directory, argv, import path, output and exit code, nothing left behind."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests import preloaded

PROBE = '''import json, os, sys
def main():
    print(json.dumps({"cwd": os.getcwd(), "argv": sys.argv, "probe": os.environ.get("PROBE"),
                      "path0": sys.path[0], "torch": "torch" in sys.modules}))
    print("a line on stderr", file=sys.stderr)
    if sys.argv[1] == "message":
        sys.exit("stopped: a message")
    return int(sys.argv[1])
'''


@pytest.mark.slow      # 7 s: a check of the test suite's own helper against a real interpreter
def test_a_forked_command_runs_in_its_own_process_as_python_m_would(tmp_path):
    (tmp_path / "probe_cmd.py").write_text(PROBE)
    done = preloaded.run("probe_cmd", ["3"], cwd=tmp_path, env={**os.environ, "PROBE": "given"})
    assert done.returncode == 3 and done.stderr == "a line on stderr\n"
    seen = json.loads(done.stdout)
    assert seen["cwd"] == str(tmp_path) and seen["argv"] == ["probe_cmd", "3"] and seen["probe"] == "given"
    assert seen["path0"] == str(tmp_path) and seen["torch"]          # python -m: the directory first; preloaded
    done = preloaded.run("probe_cmd", ["message"], cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.endswith("stopped: a message\n")
    assert "probe_cmd" not in sys.modules and "PROBE" not in os.environ      # nothing came back
