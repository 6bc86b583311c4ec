"""`--help`, an argparse-style option and an override Hydra cannot apply answer before torch and
transformers are imported: the commands import the trainer when a job starts, and the config store's
nodes come from the last registration of the package's own entries (magrpo.validation.store) while the
package's files are as they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Runs a command's main as its console script does, then says which heavy libraries it imported.
PROBE = """
import importlib, sys
sys.argv = [sys.argv[1], *sys.argv[3:]]
module = importlib.import_module({module!r})
code = 0
try:
    module.main()
except SystemExit as e:
    code = e.code
print("IMPORTED", code, *[m for m in ("torch", "transformers") if m in sys.modules], file=sys.stderr)
"""


def _probe(module: str, prog: str, args: list[str], cwd: Path) -> tuple[int, list[str], str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module), prog, "--", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    last = done.stderr.strip().splitlines()[-1].split()
    assert last[0] == "IMPORTED", done.stderr[-3000:]
    return int(last[1]), last[2:], done.stdout + done.stderr


def test_help_and_override_errors_answer_without_torch_or_transformers(tmp_path):
    _probe("magrpo.cli.train", "magrpo-train", ["--help"], tmp_path)      # the first one may fill the cache
    cases = [
        ("magrpo.cli.train", "magrpo-train", ["--help"], 0, "Config groups"),
        ("magrpo.cli.evaluate", "magrpo-eval", ["--help"], 0, "Config groups"),
        ("magrpo.cli.train", "magrpo-train", ["--max_steps=10"], 2, "write max_steps=10"),
        ("magrpo.cli.train", "magrpo-train", ["algo.num_generation=8"], 2, "did you mean 'num_generations'?"),
        ("magrpo.cli.train", "magrpo-train", ["debug=true"], 2, "choose one of: smoke"),
        ("magrpo.cli.evaluate", "magrpo-eval", ["algo=gspo"], 2, "did you mean method=gspo?"),
    ]
    for module, prog, args, code, needle in cases:
        got, imported, out = _probe(module, prog, [*args, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
        assert (got, imported) == (code, []), (args, out[-3000:])
        assert needle in out, (args, out[-3000:])
    # every registered algorithm and task is listed, from the store's nodes alone
    _, _, out = _probe("magrpo.cli.train", "magrpo-train", ["--help"], tmp_path)
    groups = out.split("Config groups", 1)[1].split("Composed config", 1)[0]
    algos = groups.split("\nalgo: ", 1)[1].splitlines()[0].split(", ")
    assert {"magrpo", "ippo", "mappo", "c3", "dr_mas", "at_grpo", "iac", "maac", "grpo", "ppo"} <= set(algos)
    assert not (tmp_path / "run").exists()


def test_the_cached_nodes_are_the_registrys_own(tmp_path):
    """In a process of its own (this one's registries hold the tests' entries too, which are never
    cached): the registration writes the cache, and the cache holds every node it stored."""
    code = f"""
import json
from pathlib import Path
from hydra.core.config_store import ConfigStore
from magrpo.validation import store as config_store
config_store.CACHE_FILE = Path({str(tmp_path / "nodes.json")!r})
config_store.register_schemas()
store = ConfigStore.instance()
data = json.loads(config_store.CACHE_FILE.read_text())
assert data["fingerprint"] == config_store.fingerprint()
for group, name, node in data["nodes"]:
    assert store.load(f"{{group}}/{{name}}.yaml").node == node, (group, name)
algos = {{n.removesuffix(".yaml") for n in store.repo["schema"]["algo"]}}
assert algos == {{name for group, name, _ in data["nodes"] if group == "schema/algo"}}, algos
print("NODES", len(data["nodes"]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split("NODES", 1)[1]) > 50


def test_a_stale_cache_or_a_loaded_plugin_fills_nothing(monkeypatch, tmp_path):
    from magrpo.core import plugins
    from magrpo.validation import store as config_store

    class Store:
        repo: dict = {}

        def store(self, **kwargs):
            raise AssertionError("nothing is stored from a cache that may not hold the registries' nodes")

    cache = tmp_path / "nodes.json"
    monkeypatch.setattr(config_store, "CACHE_FILE", cache)
    monkeypatch.setitem(config_store._registered, "from", None)
    monkeypatch.delitem(sys.modules, "magrpo.algos.base")     # as in a command that has not imported them
    nodes = [["schema/entry", "train", {"seed": 0}]]
    cache.write_text(json.dumps({"fingerprint": "an older tree", "nodes": nodes}))
    assert config_store._from_cache(Store()) is False
    cache.write_text("{not json")
    assert config_store._from_cache(Store()) is False
    cache.write_text(json.dumps({"fingerprint": config_store.fingerprint(), "nodes": nodes}))
    monkeypatch.setitem(plugins._loaded, "my_plugin", "plugins=[my_plugin]")
    assert config_store._from_cache(Store()) is False          # a plugin may register entries of its own


@pytest.mark.parametrize("group", ["algo", "task", "reward", "feedback"])
def test_a_groups_registered_options_are_the_stores_schema_nodes(group):
    from hydra.core.config_store import ConfigStore

    from magrpo.launch.groups import all_options

    registered = {n.removesuffix(".yaml") for n in ConfigStore.instance().repo["schema"][group]}
    assert registered and registered <= set(all_options(group))
