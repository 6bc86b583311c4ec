"""Every config key a run, a checkpoint or a team can record, in one of three classes.

  * inert: a hyperparameter or a label (a learning rate, a task's size, an eval setting). Taken up
    from any record.
  * code: names code that would run here (plugins, reward functions, config directories, Hydra's
    own settings, `_target_`, trust_remote_code). Taken up only under the trust rule
    (magrpo.core.trust); the caller-only keys (trust_remote_code, trust_plugins) never.
  * reach: chooses where data goes or what is read outside the directory (URLs, API-key variable
    names, local model paths, data paths, partner and diversity directories, output and cache
    directories, the sandbox level, where metrics stream). Taken up only from a directory you
    made (magrpo.core.signatures.made_by_you: your signature over the whole directory, so resuming your own
    run is unchanged); from any other record it is skipped, each skip said in one line, and you
    give the key again on your command line (or to Team.from_pretrained(..., overrides=)).

A reach key whose recorded value chooses nothing (null, empty, the built-in choice listed in
INERT_VALUES: `builtin:tiny` for a model, `auto` for the sandbox) is taken like an inert one. A key
the table does not hold (a plugin's own key, unless it declared a class with
`option(key_class=...)`) is treated as reach when its value is a string (a number, a flag or null
names no place); a key no schema has is refused by validation as before. tests/test_received.py fails when a key of a
registered schema has no class here, so a new key cannot slip in unclassified.

Keys are dotted paths without list indices: `agents.models.name_or_path` for every agent's model.
A config group picked by name (`task=tldr`, `experiment=maporl`) chooses one of the config files of
this package (or of a plugin you trusted): inert.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

INERT, CODE, REACH = "inert", "code", "reach"
CLASSES = (INERT, CODE, REACH)

# The table: key -> class. One line a node, the node's reach and code keys first.
KEY_CLASSES: dict[str, str] = {
    # top level (conf/train.yaml, conf/eval.yaml)
    **dict.fromkeys(("output_dir", "resume", "checkpoint", "team", "partners", "diversity"), REACH),
    **dict.fromkeys(("plugins", "trust_plugins"), CODE),
    **dict.fromkeys(("seed", "max_steps", "save_every", "save_final", "label", "optimized_metric", "partner_roles",
                     "partner_sampling", "diversity_coef", "tune", "methods", "split"), INERT),
    # agents
    **dict.fromkeys(("agents.models.name_or_path", "agents.models.tokenizer", "agents.models.attn_implementation"),
                    REACH),
    "agents.models.trust_remote_code": CODE,
    **dict.fromkeys(("agents.num_agents", "agents.share_base", "agents.share_policy",
                     "agents.models.revision", "agents.models.dtype", "agents.models.chat_template_kwargs",
                     "agents.models.lora.r", "agents.models.lora.lora_alpha", "agents.models.lora.lora_dropout",
                     "agents.models.lora.target_modules", "agents.models.lora.bias", "agents.models.optimizer.lr",
                     "agents.models.optimizer.weight_decay", "agents.models.optimizer.schedule",
                     "agents.models.optimizer.warmup_steps", "agents.models.sampling.temperature",
                     "agents.models.sampling.top_p", "agents.models.sampling.max_new_tokens"), INERT),
    # algo (every algorithm's keys; algo.critic_model names a model to load)
    "algo.critic_model": REACH,
    **dict.fromkeys(tuple(f"algo.{k}" for k in (
        "name", "advantage", "batch_size", "beta", "branch", "branching", "cliprange_value", "critic", "critic_lr",
        "critic_type", "critic_view", "cross_credit", "decode_step", "discount", "dynamic_sampling",
        "dynamic_sampling_rounds", "early_termination_threshold", "ent_coef", "epsilon", "epsilon_high", "gamma", "joint_mode",
        "kl_horizon", "kl_target", "lam", "loss", "loss_agg", "max_branches", "max_new_tokens", "max_prompt_length",
        "max_tree_nodes", "micro_batch_size", "normalization", "num_generations", "num_iterations",
        "num_mini_batches", "num_turns", "other_play", "overlong_buffer", "overlong_penalty", "ppo_epochs",
        "reward", "scale", "share_prompt", "signal_agents", "signal_bonus", "target_kl",
        "temperature", "top_k", "top_p", "topology", "vf_coef", "whiten_advantages", "whiten_min_std")), INERT),
    # eval
    **dict.fromkeys(tuple(f"eval.{k}" for k in (
        "every", "num_items", "num_samples", "do_sample", "temperature", "batch_size", "log_completions",
        "diagnostics", "ablation", "lazy_threshold")), INERT),
    # feedback (feedback.url, the key's variable and a local reviewer choose where answers go and what is read)
    **dict.fromkeys(("feedback.url", "feedback.api_key_env", "feedback.local_model"), REACH),
    **dict.fromkeys(tuple(f"feedback.{k}" for k in (
        "mode", "model", "timeout_s", "retries", "retry_backoff_s", "max_workers", "max_new_tokens", "temperature",
        "max_failures", "show_tests")), INERT),
    # hardware: this machine's devices and threads
    **dict.fromkeys(tuple(f"hardware.{k}" for k in (
        "name", "device", "agent_devices", "num_threads", "deterministic", "gradient_checkpointing", "autocast",
        "cpu_bf16", "cudnn_attention", "strategy", "dist_timeout_s")), INERT),
    # logger (W&B): whether metrics go to W&B at all, the entity and an online mode choose where they go
    **dict.fromkeys(("logger.name", "logger.entity", "logger.mode"), REACH),
    **dict.fromkeys(tuple(f"logger.{k}" for k in (
        "project", "group", "run_name", "tags", "job_type", "log_every")), INERT),
    # optimizer
    **dict.fromkeys(tuple(f"optimizer.{k}" for k in (
        "name", "lr", "weight_decay", "betas", "eps", "schedule", "warmup_steps", "max_grad_norm")), INERT),
    # reward (every task's; fn/fns name code, lexicon a file, verifier_model a model, and the coding
    # rewards' sandbox limits how long and how big model-written code may run here)
    **dict.fromkeys(("reward.fn", "reward.fns"), CODE),
    **dict.fromkeys(("reward.lexicon", "reward.verifier_model", "reward.sandbox_timeout_s", "reward.per_test_timeout_s",
                     "reward.memory_mb", "reward.max_timeouts", "reward.max_workers"), REACH),
    **dict.fromkeys(tuple(f"reward.{k}" for k in (
        "name", "weights", "max", "completions", "shift", "scale", "aux_defined", "correct", "correction",
        "fix_ignored_result", "ignored_result_penalty", "jaccard_cap", "jaccard_weight", "length_band_high",
        "length_band_low", "length_ramp_high", "length_ramp_low", "length_reward", "main_calls_aux", "main_defined",
        "max_ratio", "max_tokens", "min_ratio", "min_tokens",
        "not_wrapper", "persuasion", "regression", "structure_reward",
        "syntax", "tests", "tolerance", "transition_base", "transition_cap", "transition_source", "transition_step",
        "transition_weight", "transition_whole_words", "unique_band_high", "unique_band_low", "unique_ramp_high",
        "unique_ramp_low", "unique_reward", "unique_without_stopwords", "verifier")), INERT),
    # sandbox: how model-written code is confined here
    "sandbox.isolation": REACH,
    # task (every task's; a data path or a data set id chooses what is read)
    **dict.fromkeys(("task.data.path", "task.data.hub_id"), REACH),
    **dict.fromkeys(tuple(f"task.{k}" for k in (
        "name", "seed", "generator_seed", "num_train", "num_eval", "num_team", "num_options", "max_steps", "budget",
        "cost", "hare", "low", "needed", "odd_pay", "order", "show_tests", "prompt_helpers_in_setup",
        "data.builtin", "data.builtin_train_split", "data.builtin_eval_split", "data.config_name",
        "data.train_split", "data.eval_split", "data.limit", "data.text_column", "data.reference_column")), INERT),
}

# Config groups a record may pick an option of by name (a YAML file of this package's conf/ or of a
# plugin's conf directory; a pick by a path is refused: magrpo.launch.run_config.check_inheritable).
GROUPS = frozenset({"agents", "algo", "task", "reward", "feedback", "optimizer", "hardware", "logger", "eval",
                    "sandbox", "experiment", "method", "recipe", "scale", "default_run", "debug", "hparams_search"})
# Roots that are code whatever follows: Hydra's own settings (search path, callbacks, launcher).
CODE_ROOTS = frozenset({"hydra"})

# Classes a plugin's schema declared for its own keys (`option(key_class=...)`, collected when the
# schemas are registered: magrpo.validation.store).
_declared: dict[str, str] = {}


def declare(key: str, cls: str) -> None:
    """A plugin's schema field says its class (`option(..., key_class="reach")`)."""
    if cls not in CLASSES:
        raise ValueError(f"key_class={cls!r} for {key!r}: one of {', '.join(CLASSES)}")
    if key not in KEY_CLASSES:
        _declared[key] = cls


_INDEX = re.compile(r"\.\d+(?=\.|$)|\[\d+\]")


def normalized(key: str) -> str:
    """`agents.models.0.name_or_path` and `agents.models[0].name_or_path` as the table writes them."""
    return _INDEX.sub("", key.lstrip("+~").partition("@")[0].strip())


def key_class(key: str) -> str | None:
    """The class of a config key (module docstring); None when neither the table nor a plugin's
    schema classifies it."""
    k = normalized(key)
    if k.split(".")[0] in CODE_ROOTS or "_target_" in k.split("."):
        return CODE
    if k in KEY_CLASSES:
        return KEY_CLASSES[k]
    if k in _declared:
        return _declared[k]
    if "/" in k or k in GROUPS:
        return INERT            # a group option picked by name
    return None


def is_group(key: str) -> bool:
    """Whether an override's key picks an option of a config group (`task`, `method/family/x`)."""
    k = normalized(key)
    return "." not in k and ("/" in k or k in GROUPS)


# -- values of a reach key that choose nothing ----------------------------------------------------

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def names_nothing_local(value: Any) -> bool:
    """A model or data set named without a local path: a built-in (`builtin:tiny`) or a hub id
    (`Qwen/Qwen3-1.7B`, `mbpp`) that is no path here. A hub id is fetched from the hub you set up,
    never from a place the record chooses."""
    if not isinstance(value, str):
        return False
    if value.startswith("builtin:"):
        return bool(re.fullmatch(r"builtin:[\w.-]+", value))
    if not _HUB_ID.match(value) or ".." in value:
        return False
    try:
        return not Path(value).exists()
    except OSError:
        return False


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _within(v: Any, bound: float) -> bool:
    return _number(v) and 0 < v <= bound


# The coding rewards' sandbox limits at their defaults (magrpo.tasks.coding.reward.CodingRewardConfig; a
# test holds them equal): a record may tighten them, never loosen them.
SANDBOX_LIMITS: dict[str, float] = {"sandbox_timeout_s": 30.0, "per_test_timeout_s": 2.0, "memory_mb": 1024,
                                    "max_timeouts": 3}

_ATTENTION = {"eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"}

# reach key -> the values of it that choose nothing (beside null and empty, which never do)
INERT_VALUES: dict[str, Callable[[Any], bool]] = {
    "agents.models.name_or_path": names_nothing_local,
    "agents.models.tokenizer": names_nothing_local,
    "agents.models.attn_implementation": lambda v: v in _ATTENTION,
    "algo.critic_model": names_nothing_local,
    "feedback.local_model": names_nothing_local,
    "feedback.api_key_env": lambda v: v == "OPENAI_API_KEY",     # the default: the record chose nothing
    "reward.verifier_model": names_nothing_local,
    "task.data.hub_id": names_nothing_local,
    "sandbox.isolation": lambda v: v == "auto",
    "logger.name": lambda v: v == "none",
    "logger.mode": lambda v: v in ("offline", "disabled"),
    # the sandbox's limits: as tight as the coding rewards' defaults or tighter (SANDBOX_LIMITS)
    **{f"reward.{k}": functools.partial(_within, bound=bound) for k, bound in SANDBOX_LIMITS.items()},
}


def chooses_nothing(key: str, value: Any) -> bool:
    """Whether a reach key's value chooses nothing (null, empty, or one of INERT_VALUES)."""
    if value is None or value == "" or value == [] or value == {}:
        return True
    test = INERT_VALUES.get(normalized(key))
    try:
        return bool(test and test(value))
    except Exception:       # noqa: BLE001  (a value of a shape the test does not expect chooses something)
        return False


def leaves(key: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf a key's value sets (a dict or list value sets its items)."""
    whole = normalized(key) in KEY_CLASSES or normalized(key) in _declared     # a dict-valued key (reward.weights)
    if isinstance(value, dict) and value and not whole:
        for k, v in value.items():
            yield from leaves(f"{key}.{k}" if key else str(k), v)
    elif isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        for i, v in enumerate(value):
            yield from leaves(f"{key}.{i}", v)
    else:
        yield key, value


def reaching(key: str, value: Any, exempt: Iterable[str] = ()) -> list[tuple[str, Any]]:
    """The (key, value) leaves under `key` that a record may set only when you made it: reach keys
    (and keys of no class) whose value chooses something. `exempt`: keys the caller sets itself
    whatever the record says (a team's model folders)."""
    skip = {normalized(e) for e in exempt}
    out = []
    for leaf, v in leaves(key, value):
        cls = key_class(leaf)
        if cls in (INERT, CODE) or normalized(leaf) in skip:
            continue
        if cls is None and not isinstance(v, str):
            continue        # a number, a flag or null names no place: only a string can
        if not chooses_nothing(leaf, v):
            out.append((leaf, v))
    return out


def table() -> list[tuple[str, str]]:
    """(key, class) of every key the table classifies, sorted: what docs/security.md shows."""
    return sorted(KEY_CLASSES.items())
