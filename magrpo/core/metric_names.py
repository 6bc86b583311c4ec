"""The names a run logs, and what each means: one name, one meaning, written down once.

`METRICS` lists every key of `metrics.jsonl` (and W&B) and `SUMMARY_KEYS` every top-level key of
`summary.json`. The docs' metrics reference is generated from them (scripts/docs_tables.py), and
tests/test_docs.py trains every algorithm briefly and fails on a logged name this catalogue does not
hold, and on a name it says an algorithm logs that the algorithm did not log. Placeholders:
`<policy>` = `agent_<k>` or `policy` (a shared policy's update), `<k>` an index from 1, `<t>` a
turn, `<component>` a reward component, `<name>` a reward function, `<metric>` one of the task's
evaluation metrics (the tasks reference lists them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALL = "every algorithm"
GROUP_RELATIVE = ("magrpo", "grpo", "at_grpo", "dr_mas", "c3")
PPO_FAMILY = ("ippo", "mappo", "ppo")
TURN_CRITICS = ("iac", "maac")
UPDATE = GROUP_RELATIVE + PPO_FAMILY + TURN_CRITICS


@dataclass(frozen=True)
class Metric:
    name: str                              # with placeholders
    meaning: str
    algos: tuple[str, ...] = ()            # the algorithms that always log it (checked); () = not checked
    when: str = ""                         # logged only in some runs: when

    @property
    def logged_by(self) -> str:
        who = ALL if set(self.algos) == set(UPDATE) else ", ".join(self.algos)
        return "; ".join(x for x in (who, self.when) if x) or "–"

    def pattern(self) -> re.Pattern[str]:
        parts = re.split(r"(<\w+>)", self.name)
        regex = "".join(_PLACEHOLDER.get(p, "[^/]+") if p.startswith("<") else re.escape(p) for p in parts)
        return re.compile(f"^{regex}$")


_PLACEHOLDER = {"<policy>": r"(agent_\d+|policy)", "<k>": r"\d+", "<t>": r"\d+"}


def _policy(name: str, meaning: str, algos: tuple[str, ...] = UPDATE, when: str = "") -> Metric:
    return Metric(f"train/<policy>/{name}", meaning, algos, when)


METRICS: tuple[Metric, ...] = (
    Metric("step", "the optimizer step the row belongs to (0: before training)", UPDATE),
    # -- the batch's rewards ---------------------------------------------------------------------
    Metric("train/reward_mean", "mean team reward over every node of the step's turn tree (what the loss sees)", UPDATE),
    Metric("train/reward_std", "standard deviation of those rewards", UPDATE),
    Metric("train/reward/<component>", "mean of one reward component (a reward function's value: `reward/<name>`)", UPDATE),
    Metric("train/turn_<t>/reward_mean", "mean reward of the nodes of turn t", UPDATE),
    Metric("train/turn_<t>/reward/<component>", "one component's mean over the nodes of turn t", UPDATE),
    Metric("train/turn_<t>/nodes", "nodes of turn t in the step's trees", when="algo.num_turns > 1"),
    Metric("train/turn_<t>/expanded", "nodes of turn t expanded into a next turn", when="algo.num_turns > 1"),
    Metric("train/turn_<t>/terminated_sets", "sibling sets of turn t stopped by early_termination_threshold",
           when="algo.early_termination_threshold set"),
    Metric("train/turn_<t>/prompt_tokens_mean", "mean prompt length (tokens) of turn t's histories", when="algo.num_turns > 1"),
    Metric("train/prompt_truncated", "histories cut to algo.max_prompt_length this step", when="algo.num_turns > 1"),
    Metric("train/frac_reward_zero_std", "share of groups whose rewards are all equal (no learning signal)", UPDATE),
    Metric("train/sequences_per_item", "sequences generated per item of the batch: the step's generation budget", UPDATE),
    Metric("train/completions/tokens", "completion tokens generated this step", UPDATE),
    Metric("train/completions/mean_length", "mean completion length (tokens) over every agent", UPDATE),
    Metric("train/feedback/degraded", "items whose feedback fell back to `plain` (an expert that failed)",
           when="algo.num_turns > 1"),
    Metric("partners/member", "the population member (its index in partners=) that filled the partner roles this "
           "step (magrpo.team.partners)", when="partners=[...]"),
    Metric("partners/role_<k>", "1 when a partner played role k this step", when="partners=[...]"),
    Metric("train/dynamic_sampling/rounds", "DAPO: batches drawn this step", when="algo.dynamic_sampling=true"),
    Metric("train/dynamic_sampling/items_drawn", "DAPO: items drawn over those rounds", when="algo.dynamic_sampling=true"),
    Metric("train/dynamic_sampling/items_kept", "DAPO: items kept (groups with signal)", when="algo.dynamic_sampling=true"),
    Metric("train/dynamic_sampling/dropped_groups", "DAPO: groups dropped because their returns were all equal",
           when="algo.dynamic_sampling=true"),
    Metric("train/c3/decision_<k>/reward_mean", "C3: mean replayed reward of decision k's alternatives", ("c3",)),
    Metric("train/agent_<k>/signal_info_bits", "positive signalling: the batch's I(move; prompt) in bits over "
           "agent k's first-turn samples, the mean of the pmi its returns gain", when="algo.signal_bonus > 0"),
    Metric("train/agent_<k>/diversity_nll", "the diversity term: the mean -log-likelihood (nats) of agent k's "
           "first-turn answers under the earlier members' mixture; its returns gain diversity_coef times each",
           when="diversity=[...]"),
    Metric("train/kl_coef", "the KL penalty's coefficient (adaptive with algo.kl_target)", PPO_FAMILY),
    # -- per policy (a role's returns per agent; a shared policy's update under train/policy/) ----
    _policy("loss", "the total loss of the update (policy loss + value and KL terms)"),
    _policy("policy_loss", "the policy-gradient part of the loss"),
    _policy("kl", "token-mean k3 estimate of KL(pi || reference) over completion tokens (0 without a reference)"),
    _policy("entropy", "token-mean entropy of the policy on its completions"),
    _policy("clip_frac", "share of completion tokens whose ratio was clipped (a sequence ratio counts for all its tokens)"),
    _policy("approx_kl", "k3 KL(pi_old || pi) of the passes after the first update"),
    _policy("grad_norm", "gradient norm before clipping"),
    _policy("lr", "the learning rate of the step"),
    _policy("return_mean", "mean return credited to the agent's samples"),
    _policy("advantage_abs_mean", "mean |advantage| (iac/maac: mean |TD error|)"),
    _policy("completions/mean_length", "mean completion length of the agent (tokens)"),
    _policy("kl_penalty", "the reward penalty: sequence sum of log pi - log ref that the adaptive controller tracks",
            PPO_FAMILY),
    _policy("value_loss", "the critic's loss", ("ippo", "mappo", "ppo", "iac")),
    _policy("value_mean", "the critic's mean value", ("ippo", "mappo", "ppo", "iac")),
    _policy("value_clip_frac", "share of value predictions clipped by algo.cliprange_value", PPO_FAMILY),
    _policy("explained_variance", "1 - Var(R - V) / Var(R): how much of the returns the critic explains", PPO_FAMILY),
    _policy("ppo_epochs_run", "PPO epochs run before algo.target_kl stopped them", PPO_FAMILY),
    Metric("train/critic_<k>/value_loss", "a separate critic model's loss (iac/maac with algo.critic=model)", ("maac",)),
    Metric("train/critic_<k>/value_mean", "that critic's mean value", ("maac",)),
    Metric("train/critic_<k>/grad_norm", "that critic's gradient norm", ("maac",)),
    Metric("train/critic_<k>/lr", "that critic's learning rate", ("maac",)),
    # -- cost ------------------------------------------------------------------------------------
    Metric("time/generate_s", "seconds generating this step", UPDATE),
    Metric("time/reward_s", "seconds scoring this step", UPDATE),
    Metric("time/feedback_s", "seconds making feedback between turns", UPDATE),
    Metric("time/update_s", "seconds in the update (forward, backward, optimizer)", UPDATE),
    Metric("time/other_s", "the rest of the step", UPDATE),
    Metric("time/step_s", "the whole step", UPDATE),
    Metric("train/flops", "training FLOPs of this step, counted from the tokens each pass ran: 2N per token forward, "
           "4N more through a full backward (magrpo.models.flops says what it leaves out)", UPDATE),
    Metric("train/flops_total", "training FLOPs since the run began (train/flops summed; kept across a resume)", UPDATE),
    Metric("speed/prompts_per_s", "items trained per second this step", UPDATE),
    Metric("speed/tokens_per_s", "completion tokens generated per second this step", UPDATE),
    Metric("memory/peak_cuda_gb", "peak CUDA memory allocated so far (GiB; the largest over the agents' devices, the mean over torchrun ranks)",
           when="an agent on a GPU"),
    Metric("memory/peak_cuda_reserved_gb", "peak CUDA memory the caching allocator reserved so far (GiB)",
           when="an agent on a GPU"),
    # -- evaluation ------------------------------------------------------------------------------
    Metric("eval/reward_mean", "mean team reward of the answers after the last turn", UPDATE),
    Metric("eval/reward_std", "their standard deviation", UPDATE),
    Metric("eval/normalized_return", "the reward on its raw scale as a fraction of the task's maximum, in [0, 1]", UPDATE),
    Metric("eval/reward/<component>", "one reward component's mean", UPDATE),
    Metric("eval/turn_<t>/reward_mean", "mean reward of the answers after turn t", UPDATE),
    Metric("eval/turn_<t>/normalized_return", "normalized return after turn t", UPDATE),
    Metric("eval/turn_<t>/reward/<component>", "a component after turn t", UPDATE),
    Metric("eval/turn_<t>/<metric>", "a task metric after turn t", when="tasks with metrics"),
    Metric("eval/<metric>", "a task's own metric (pass@k, rouge_l, codebleu, acc/level_*, accuracy, ...: the tasks "
           "reference)", when="tasks with metrics"),
    Metric("eval/output_tokens_mean", "mean tokens per generated answer", UPDATE),
    Metric("eval/response_time_s", "generation seconds per item", UPDATE),
    Metric("eval/reward_time_s", "seconds scoring the evaluation", UPDATE),
    Metric("eval/num_items", "items evaluated", UPDATE),
    Metric("eval/feedback/degraded", "items whose feedback fell back to `plain`", when="algo.num_turns > 1"),
    Metric("eval/agent_<k>/contribution", "mean drop of the team reward when agent k's answer is replaced by a "
           "neutral one", when="eval.diagnostics=true"),
    Metric("eval/lazy_agent_rate", "share of joint answers in which some agent's drop is within eval.lazy_threshold",
           when="eval.diagnostics=true"),
    Metric("eval/answer_similarity", "mean ROUGE-L F between the agents' answers (1: the roles collapsed)",
           when="eval.diagnostics=true"),
    Metric("eval/agent_<k>/influence", "how much agent k's answer changes the answers after it",
           when="eval.diagnostics=true, a chain or several turns"),
    Metric("eval/diagnostics_time_s", "seconds the diagnostics took", when="eval.diagnostics=true"),
    Metric("eval/diagnostics/reward_calls", "joint answers re-scored by the diagnostics", when="eval.diagnostics=true"),
    Metric("eval/diagnostics/score_calls", "batched task.score calls of the diagnostics", when="eval.diagnostics=true"),
    Metric("eval/diagnostics/generations", "sequences the diagnostics generated", when="eval.diagnostics=true"),
)

SUMMARY_KEYS: dict[str, str] = {
    "status": "running, finished, failed or interrupted",
    "initial_eval": "the evaluation before training (metric names without the eval/ prefix)",
    "final_eval": "the evaluation after training",
    "best": "the best value of the primary metric over the evaluations, with its step",
    "steps": "optimizer steps taken",
    "world_size": "processes that trained (torchrun)",
    "wall_seconds": "wall time of the run",
    "train_flops": "training FLOPs counted over the run (the last train/flops_total)",
    "evals": "every evaluation's metrics, by step",
    "resumed_from": "the checkpoint a resumed run started from, and the run's status before",
    "from_run": "the run a checkpoint= evaluation or a resume took its overrides from",
    "config": "the key config choices: task, algo, label, models, seed, team level, policies, algo.* keys",
    "process": "pid, host and a heartbeat refreshed every 30 s",
    "phase": "on failure: config, setup or training",
    "error": "on failure: the exception's type",
    "reason": "on failure: the one-line reason",
    "sandbox_isolation": "the sandbox level that ran (coding tasks)",
}


def documented(name: str) -> Metric | None:
    """The catalogue entry a logged name falls under (the most specific), or None."""
    hits = [m for m in METRICS if m.pattern().match(name)]
    return min(hits, key=lambda m: m.name.count("<")) if hits else None
