"""The config is typed in the code a reader sees: a function that takes a run's config, or one of its
groups, names the schema class it reads (`cfg: RunConfig`, `algo: GroupRelativeConfig`,
`hw: HardwareSchema`), never `Any`, never nothing. A composed Hydra node (`DictConfig`) is taken
only where a config is still being composed or checked: the entry points and validation, and the
readers of a record before it is validated. The type checker (`make typecheck`, mypy) then holds
every read against the schema that declares the key."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "magrpo"

# Parameter names that hold a run's config or one of its groups, wherever they appear.
CONFIG_PARAMS = {"cfg", "config", "algo", "hw", "hw_cfg", "hardware", "agents_cfg", "reward_cfg", "task_cfg",
                 "feedback_cfg", "eval_cfg", "opt_cfg", "data_cfg", "lora", "sandbox"}

# Where a config is still a composed node: commands and launchers compose it, validation checks it,
# and a record's readers hand it to validation.
NODE_PLACES = ("cli/", "launch/", "experiment.py", "validation/", "team/checks.py", "core/trust.py",
               "core/received.py", "core/key_classes.py", "core/schema.py", "core/instances.py", "table/")


def untyped_config_params(root: Path) -> list[str]:
    """`path:line function(param: annotation)` for every config parameter annotated Any (or not at
    all), or a bare DictConfig outside the places a config is still a node."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                if arg.arg not in CONFIG_PARAMS:
                    continue
                note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                names = {n.id for n in ast.walk(arg.annotation) if isinstance(n, ast.Name)} if note else set()
                if not note or "Any" in names or ("DictConfig" in names and not rel.startswith(NODE_PLACES)):
                    out.append(f"{rel}:{node.lineno} {node.name}({arg.arg}: {note or '(none)'})")
    return out


def test_no_config_parameter_is_annotated_any():
    assert untyped_config_params(ROOT) == []


def test_the_config_parameter_check_finds_a_planted_one(tmp_path):
    (tmp_path / "algos").mkdir()
    (tmp_path / "algos" / "x.py").write_text(
        "from typing import Any\n"
        "def step(cfg: Any, n: int) -> None: ...\n"
        "def fine(algo: 'GroupRelativeConfig') -> None: ...\n"
        "def bare(hw) -> None: ...\n"
        "def node(config: DictConfig) -> None: ...\n")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "y.py").write_text("def main(cfg: DictConfig) -> None: ...\n")
    assert untyped_config_params(tmp_path) == [
        "algos/x.py:2 step(cfg: Any)", "algos/x.py:4 bare(hw: (none))", "algos/x.py:5 node(config: DictConfig)"]
