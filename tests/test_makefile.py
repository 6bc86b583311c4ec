"""`make setup` installs the CPU build of torch from the public index too, where pip's own default on
Linux is the CUDA build (several GB): TORCH_INDEX (the PyTorch CPU index by default) is added to pip's
indexes unless they give that build already; `TORCH_INDEX=` takes pip's own default build."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _torch_line(tmp_path: Path, *variables: str) -> str:
    """The command `make setup` installs torch with, as make prints it (`make -n`: nothing runs)."""
    done = subprocess.run(["make", "-n", "setup", f"VENV={tmp_path / 'venv'}", *variables], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if re.search(r"pip install -q torch==", ln)]
    return line


def test_setup_adds_the_cpu_index_unless_pips_own_indexes_give_the_cpu_build(tmp_path):
    line = _torch_line(tmp_path)
    pip = tmp_path / "venv" / "bin" / "pip"
    version = re.search(r"torch==(\S+)", line).group(1)
    assert line.startswith(f"{pip} install -q torch=={version} $({pip} install -q --dry-run --no-deps "
                           f"--ignore-installed --report - torch=={version} ")
    assert f"""grep -q '"version": "{version}+cpu"' || echo --extra-index-url {CPU_INDEX})""" in line
    # another build's index: its own label is the one looked for
    cu = _torch_line(tmp_path, "TORCH_INDEX=https://download.pytorch.org/whl/cu128")
    assert f'"version": "{version}+cu128"' in cu and cu.endswith("--extra-index-url https://download.pytorch.org/whl/cu128)")
    # TORCH_INDEX= : pip's own default build, nothing looked up
    assert _torch_line(tmp_path, "TORCH_INDEX=") == f"{pip} install -q torch=={version} "


def test_the_index_check_reads_pips_report_as_pip_writes_it(tmp_path):
    """The check run with this environment's pip: it adds the index exactly when pip's own indexes do
    not resolve torch to the build the index holds (read here from pip's JSON report)."""
    line = _torch_line(tmp_path, "TORCH_INDEX=https://example.invalid/whl/cpu")
    check = line.split(" ", 4)[4].replace(str(tmp_path / "venv" / "bin" / "pip"), f"{sys.executable} -m pip")
    version = re.search(r"torch==(\S+)", line).group(1)
    report = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-deps",
                             "--ignore-installed", "--report", "-", f"torch=={version}"],
                            capture_output=True, text=True, timeout=300)
    resolved = [item["metadata"]["version"] for item in json.loads(report.stdout or "{}").get("install", [])]
    added = subprocess.run(["bash", "-c", f"echo {check}"], capture_output=True, text=True, timeout=300).stdout.strip()
    wanted = "" if resolved == [f"{version}+cpu"] else "--extra-index-url https://example.invalid/whl/cpu"
    assert added == wanted, (resolved, added)
    # a build no index holds is always looked up in its index
    line = _torch_line(tmp_path, "TORCH_INDEX=https://example.invalid/whl/zz9")
    check = line.split(" ", 4)[4].replace(str(tmp_path / "venv" / "bin" / "pip"), f"{sys.executable} -m pip")
    added = subprocess.run(["bash", "-c", f"echo {check}"], capture_output=True, text=True, timeout=300).stdout.strip()
    assert added == "--extra-index-url https://example.invalid/whl/zz9"
