"""Typed schemas for the config groups: one dataclass per node, the one place its keys and their
defaults are declared.

Merging the composed config into them (`typed_node`) catches unknown keys (typos) and wrong types;
`magrpo.validation.checks.validate` then checks values against the allowed sets and ranges, and
`magrpo.validation.store` gives Hydra each node's defaults. Either way a bad config stops the run with a
message that names the key, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from magrpo.core.schema import (
    ConfigError,
    at_least,
    did_you_mean,
    option,
    positive,
    within,
)
from magrpo.sandbox.limits import ISOLATION_CHOICES

_DEVICE_RE = re.compile(r"^(cpu|cuda|cuda:\d+|mps)$")
DEVICES = "cpu, cuda, cuda:N, mps"


def conf_dir() -> Path:
    """The repository's `conf/` in a source checkout (editable install), else the copy shipped
    inside the package (a wheel install; see setup.py)."""
    package = Path(__file__).resolve().parents[1]       # magrpo/
    repo = package.parent / "conf"
    return repo if (repo / "train.yaml").is_file() else package / "conf"


CONF_DIR = str(conf_dir())


DTYPE_CHOICES = ["float32", "bfloat16", "float16", "auto"]
# bf16 on a CPU (magrpo.models.cpu_bf16): auto widens products where the CPU has no bf16 unit.
CPU_BF16_MODES = ("auto", "native", "widen")


@dataclass
class LoraSchema:
    r: int = positive(16, help="the rank of each LoRA update matrix")
    lora_alpha: int = positive(32, help="LoRA scaling numerator: updates are scaled by lora_alpha / r")
    lora_dropout: float = within(0.0, 1.0, 0.05, help="dropout probability on the LoRA input")
    target_modules: Any = option("all-linear",
                                 help="modules that get an adapter: a list of names, or all-linear")
    bias: str = option("none", choices=["none", "all", "lora_only"],
                       help="which biases train: none, all, or only those of LoRA layers")


SCHEDULES = ["constant", "linear", "cosine"]


def _agent_override(shared: str, test: Callable[[Any], bool], allowed: str, *, help: str) -> Any:
    """One agent's override of the shared key `shared`: null (the default) = the shared value."""
    return option(None, check=lambda v: v is None or test(v), allowed=f"{allowed}, or null for {shared}", help=help)


@dataclass
class AgentOptimizerSchema:
    """One agent's overrides of the `optimizer` group (agents.models.K.optimizer); null = the shared value."""
    lr: float | None = _agent_override("optimizer.lr", lambda v: v > 0, "> 0", help="this agent's learning rate")
    weight_decay: float | None = _agent_override("optimizer.weight_decay", lambda v: v >= 0, ">= 0",
                                                 help="this agent's AdamW weight decay")
    schedule: str | None = _agent_override("optimizer.schedule", lambda v: v in SCHEDULES, ", ".join(SCHEDULES),
                                           help="this agent's learning-rate schedule after warmup")
    warmup_steps: int | None = _agent_override("optimizer.warmup_steps", lambda v: v >= 0, ">= 0",
                                               help="this agent's linear warmup, in optimizer steps")


@dataclass
class AgentSamplingSchema:
    """One agent's overrides of the shared sampling keys (agents.models.K.sampling); null = algo.*."""
    temperature: float | None = _agent_override("algo.temperature", lambda v: v > 0, "> 0",
                                                help="this agent's sampling temperature")
    top_p: float | None = _agent_override("algo.top_p", lambda v: 0 < v <= 1, "in (0, 1]",
                                          help="this agent's nucleus-sampling mass")
    max_new_tokens: int | None = _agent_override("algo.max_new_tokens", lambda v: v >= 1, ">= 1",
                                                 help="this agent's cap on tokens per answer")


@dataclass
class ModelSchema:
    name_or_path: str = option(MISSING, help="hub id, local directory, or builtin:NAME")
    tokenizer: str | None = option(None, help="defaults to name_or_path")
    revision: str | None = option(None, help="hub branch, tag or commit to load; null = the default branch")
    dtype: str = option("float32", choices=DTYPE_CHOICES, help="weight dtype; auto = the checkpoint's own")
    trust_remote_code: bool = option(False,
                                     help="run Python code shipped with the model (a warning is logged)")
    attn_implementation: str | None = option(None,
                                             help="transformers' attention kernel (e.g. sdpa, "
                                                  "flash_attention_2); null = its default")
    lora: LoraSchema | None = None
    chat_template_kwargs: dict[str, Any] = option(default_factory=dict,
                                                  help="extra arguments to the chat template "
                                                       "(e.g. enable_thinking: false)")
    optimizer: AgentOptimizerSchema = option(default_factory=AgentOptimizerSchema,
                                             help="this agent's lr, schedule...")
    sampling: AgentSamplingSchema = option(default_factory=AgentSamplingSchema,
                                           help="its temperature, top_p...")


@dataclass
class AgentsSchema:
    num_agents: int = at_least(1, 2, help="agents in the team (one role each)")
    share_base: bool = option(False, help="one base model, one LoRA adapter per agent (a LoRA per role)")
    share_policy: bool = option(False, help="one model and one optimizer play every role (a shared policy)")
    models: list[ModelSchema] = field(default_factory=list)


@dataclass
class OptimizerSchema:
    name: str = option("adamw", choices=["adamw"], help="the optimizer (AdamW)")
    lr: float = positive(1e-3,
                         help="the learning rate; 1e-3 suits the tiny default agents, real models want ~1e-5")
    weight_decay: float = at_least(0, 0.0, help="AdamW's decoupled weight decay")
    betas: list[float] = option(default_factory=lambda: [0.9, 0.999], allowed="two numbers in [0, 1)",
                                check=lambda v: len(v) == 2 and all(0 <= b < 1 for b in v),
                                help="AdamW's (beta1, beta2) moment decays")
    eps: float = positive(1e-8, help="AdamW's denominator epsilon")
    schedule: str = option("constant", choices=SCHEDULES, help="learning-rate schedule after warmup")
    warmup_steps: int = at_least(0, 0, help="optimizer steps of linear warmup from 0 to lr")
    max_grad_norm: float | None = option(1.0, check=lambda v: v is None or v > 0,
                                         allowed="> 0, or null to turn clipping off",
                                         help="clip each policy's gradient to this global L2 norm")


@dataclass
class HardwareSchema:
    name: str = option("cpu", help="the preset's name (cpu, gpu, multi_gpu); a label only")
    device: str = option("cpu", check=lambda v: v == "auto" or bool(_DEVICE_RE.match(v)),
                         allowed=f"one of {DEVICES}, auto",
                         help="the device of every agent; auto = a GPU when there is one")
    agent_devices: list[str] | None = option(
        None, check=lambda v: v is None or all(_DEVICE_RE.match(d) for d in v),
        allowed=f"null, or a list of {DEVICES}",
        help="agent i runs on agent_devices[i % len]; null = all on device")
    num_threads: int | None = option(None, check=lambda v: v is None or v >= 1, allowed=">= 1, or null",
                                     help="torch CPU threads; null = torch's default")
    deterministic: bool = option(False, help="torch deterministic algorithms (warns where none exists)")
    # Memory: recompute activations in backward instead of storing them; bf16 autocast of every
    # forward (weights stay in their dtype); algo.micro_batch_size bounds the rows per forward.
    gradient_checkpointing: bool = option(False,
                                          help="recompute activations in backward (less memory, more time)")
    autocast: str = option("none", choices=["none", "bf16"],
                           help="bf16 = every forward under bf16 autocast (weights keep their dtype)")
    cpu_bf16: str = option("auto", choices=CPU_BF16_MODES,
                           help="bf16 on a CPU (bf16 weights or autocast): auto = linear "
                                "products widened to float32 where the CPU has no bf16 unit "
                                "(AVX512-BF16, AMX), widen = on any CPU, native = torch's "
                                "own bf16 kernels on any CPU (magrpo/models/cpu_bf16.py).")
    cudnn_attention: bool = option(False,
                                   help="On a GPU: let torch's scaled-dot-product attention pick "
                                        "the cuDNN kernel. Off by default: with the KV length "
                                        "growing by one every decoding step it re-plans each call, "
                                        "and decoding a 1.7B model on an H100 ran at 59-60 ms per "
                                        "token with it, 20-29 ms without (torch 2.11, CUDA 13).")
    strategy: str = option("ddp", choices=["ddp", "fsdp"],
                           help="Data-parallel training (torchrun): ddp = a full copy of each "
                                "agent per rank; fsdp = parameters, gradients and optimizer "
                                "state sharded over the ranks (magrpo/models/distributed.py).")
    dist_timeout_s: int = at_least(1, 1800, " (seconds a collective waits for the other ranks)",
                                   help="how long a collective waits for the other ranks (seconds)")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        """A device this machine does not have stops the run here, not at the first tensor moved."""
        for i, dev in enumerate(node.agent_devices or []):
            _check_device_available(f"{prefix}agent_devices[{i}]", dev)
        if not node.agent_devices:
            _check_device_available(f"{prefix}device", node.device)



def _check_device_available(key: str, dev: str) -> None:
    if dev in ("cpu", "auto"):
        return
    import torch  # noqa: PLC0415  start-up: torch loads only where a model does; the schemas are read without it

    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise ConfigError(f"{key}={dev!r}: no CUDA device is usable here (torch {torch.__version__}, {build}); "
                              f"use hardware=cpu, or {key}=auto to take a GPU only when there is one")
        count, index = torch.cuda.device_count(), int(dev.partition(":")[2] or 0)
        if index >= count:
            raise ConfigError(f"{key}={dev!r}: this machine has {count} CUDA device(s); choose cuda:0..cuda:{count - 1}")
    elif dev == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}='mps': the MPS backend is not available here; use cpu or auto")


@dataclass
class LoggerSchema:
    name: str = option("none", choices=["none", "wandb"],
                       help="where metrics also go: none (metrics.jsonl only) or W&B")
    project: str = option("magrpo", help="the W&B project")
    entity: str | None = option(None, help="the W&B team or user; null = your default entity")
    group: str | None = option(None,
                               help="W&B group; null = one per sweep, or <task>-<label> for a single run")
    run_name: str | None = option(None, help="W&B run name; null = <label>-<task>-<seed>")
    tags: list[str] = option(default_factory=list, help="W&B tags of the run")
    job_type: str = option("train", help="W&B job type (magrpo-eval always logs eval)")
    mode: str = option("offline", choices=["offline", "online", "disabled"],
                       help="offline = files under <run_dir>/wandb to sync later; online streams")
    log_every: int = at_least(1, 1, help="steps between console lines and logged train metrics")


@dataclass
class EvalSchema:
    every: int = at_least(0, 20, " (0 = only before and after training)",
                          help="steps between evaluations during training")
    num_items: int | None = option(None, check=lambda v: v is None or v >= 1,
                                   allowed=">= 1, or null for the whole split", help="eval items evaluated")
    num_samples: int = at_least(1, 2, help="samples per item; pass@k reports every k <= num_samples")
    do_sample: bool = option(True, help="sample answers; false = greedy decoding")
    temperature: float = positive(1.0, help="sampling temperature of the evaluation")
    batch_size: int = at_least(1, 64, help="items per generate call")
    log_completions: int = at_least(0, 8, help="sample completions shown in the log and the W&B table")
    # Collaboration diagnostics (magrpo.evaluation.collaboration; docs/evaluation.md, "Collaboration diagnostics"): off by default.
    diagnostics: bool = option(False, help="contribution, lazy agents, similarity, influence")
    ablation: str = option("empty", choices=["empty", "base"], help="what replaces an agent's answer")
    lazy_threshold: float = at_least(0, 1e-6, " (an absolute reward difference)",
                                     help="an agent is lazy when its reward "
                                          "drop is at most this (reward units)")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        if not node.do_sample and node.num_samples > 1:
            raise ConfigError(f"{prefix}num_samples={node.num_samples} with {prefix}do_sample=false draws the same "
                              f"greedy answer {node.num_samples} times (pass@k would mean nothing); set "
                              f"{prefix}num_samples=1 or {prefix}do_sample=true")


@dataclass
class SandboxSchema:
    isolation: str = option("auto", choices=list(ISOLATION_CHOICES),
                            help="How model-generated code is confined (docs/security.md): `auto` "
                                 "takes the strongest level that works here (namespaces, then uid "
                                 "when root, then guards) and warns once when that is not "
                                 "namespaces; a named level refuses to start where it cannot run.")


@dataclass
class TrainSchema:
    seed: int = at_least(0, 0, help="seeds torch, the data order and sampling")
    plugins: list[str] = option(default_factory=list,
                                help="Modules imported before anything is composed (magrpo.core.plugins); "
                                     "a run records every plugin it imported here, and the commands that "
                                     "take the run up import them again as the trust rule says.")
    trust_plugins: bool = option(False,
                                 help="Import the plugins and reward functions that the "
                                      "run or team this command takes up records, though "
                                      "you did not make it (magrpo.core.trust); only "
                                      "your own command line sets it, never a saved run.")
    max_steps: int = at_least(0, 120, help="optimizer steps (one step = one batch of algo.batch_size items)")
    resume: str | None = option(None,
                                help="a checkpoint (.../checkpoints/step_N) or a "
                                     "run directory (its newest); null = fresh")
    save_every: int = at_least(0, 0, " (0 = final checkpoint only)",
                               help="steps between checkpoints; 0 = only the final one")
    save_final: bool = option(True, help="write a checkpoint at the end of training")
    output_dir: str = option("outputs/run", help="the run directory (metrics, checkpoints, summary.json)")
    label: str | None = option(None,
                               help="the method's name in tables and W&B (a paper row); null = the algo")
    optimized_metric: str | None = option(None,
                                          help="final-eval metric returned to a sweeper; "
                                               "null = the task's primary metric")
    partners: list[str] = option(default_factory=list,
                                 help="Frozen partners (magrpo/team/partners.py, Fictitious "
                                      "Co-Play): runs, checkpoints, RUN/checkpoints (every "
                                      "one), exported teams or populations (magrpo-population) "
                                      "whose agents fill partner roles in training")
    partner_roles: list[int] | None = option(None,
                                             help="the roles partners fill, numbered from 1; null "
                                                  "= one role per step, drawn (every role learns)")
    partner_sampling: str = option("uniform", choices=["uniform", "cycle"],
                                   help="which member plays each step: uniform (drawn) or cycle (in order)")
    diversity: list[str] = option(default_factory=list,
                                  help="A population's diversity term (magrpo/algos/diversity.py): earlier "
                                       "members (the entries partners takes); each answer's return gains "
                                       "diversity_coef x its -log-likelihood under their mixture")
    diversity_coef: float = at_least(0, 0.1,
                                     help="the diversity term's weight: reward per nat "
                                          "of -log-likelihood under the earlier members")
    tune: dict[str, str] | None = option(None,
                                         help="A paper row's search space for `magrpo-paper "
                                              "--tune-trials K` (override key -> Optuna "
                                              "sweeper spec); inert in a run itself.")
    agents: AgentsSchema = field(default_factory=AgentsSchema)
    # The groups a run chooses: the composed node of whichever option, merged into that option's
    # own schema by `validate`. A base type here (TaskConfig...) would refuse the option's own keys
    # wherever a whole config is merged into this schema (magrpo.team.checks merges a recorded one
    # into OmegaConf.structured(TrainSchema)); RunConfig (magrpo.config.run) holds them typed by
    # their bases (magrpo.config.groups), the instance by the chosen option's schema.
    task: Any = None
    reward: Any = None
    algo: Any = option(None, help="checked against the chosen algorithm's own schema")
    optimizer: OptimizerSchema = field(default_factory=OptimizerSchema)
    hardware: HardwareSchema = field(default_factory=HardwareSchema)
    logger: LoggerSchema = field(default_factory=LoggerSchema)
    feedback: Any = option(None, help="checked against the chosen feedback mode's own schema")
    eval: EvalSchema = field(default_factory=EvalSchema)
    sandbox: SandboxSchema = field(default_factory=SandboxSchema)


@dataclass
class EvalRunSchema(TrainSchema):
    """magrpo-eval: the training groups plus what to evaluate."""

    methods: list[str] | None = option(None,
                                       help="methods to evaluate; null = [team] with "
                                            "a checkpoint, else the four baselines")
    checkpoint: str | None = option(None,
                                    help="a training checkpoint (.../checkpoints/step_N) or a run directory")
    team: str | None = option(None, help="an exported team (magrpo-export) or its hub repo id")
    split: str = option("eval", choices=["eval", "train"], help="the task split evaluated")


# The top-level keys of each entry point's own config (conf/train.yaml, conf/eval.yaml): the rest of
# its schema are the config groups, or keys the other entry point reads (magrpo-eval does not train).
ENTRY_KEYS = {
    "train": ("seed", "plugins", "trust_plugins", "max_steps", "resume", "save_every", "save_final", "output_dir",
              "label", "optimized_metric", "partners", "partner_roles", "partner_sampling", "diversity",
              "diversity_coef", "eval", "sandbox"),
    "eval": ("seed", "plugins", "trust_plugins", "methods", "checkpoint", "team", "split", "output_dir", "label",
             "eval", "sandbox"),
}

# The config groups whose every option has one schema (the others' schema is the option's entry:
# an algorithm's, a feedback mode's, a task's and its reward's, stored under schema/<group>/<name>).
GROUP_SCHEMAS = {"agents": AgentsSchema, "optimizer": OptimizerSchema, "hardware": HardwareSchema,
                 "logger": LoggerSchema}


def defaults_of(schema: type) -> dict:
    """A schema's defaults as plain data (nested schemas as dicts, MISSING as '???'): what
    `OmegaConf.to_container(OmegaConf.structured(schema))` gives (tests/test_config.py holds them
    equal for every registered schema), read from the dataclass fields directly, which is ~50x
    faster; every command pays it for every schema when it starts."""
    out = {}
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = MISSING
        out[f.name] = _as_plain_data(value)
    return out


def _as_plain_data(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _as_plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _as_plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_plain_data(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def entry_defaults(entry: str) -> dict:
    """The defaults conf/<entry>.yaml starts from (`schema/entry@_here_: <entry>`): its top-level keys,
    eval.* and sandbox.*, from TrainSchema / EvalRunSchema."""
    full = defaults_of(EvalRunSchema if entry == "eval" else TrainSchema)
    node = {k: full[k] for k in ENTRY_KEYS[entry]}
    if entry == "eval":
        node["eval"].pop("every")         # a training run's evaluation cadence: magrpo-eval does not train
    return node


def optimized_metric(cfg: TrainSchema, primary: str) -> str:
    """The metric a sweeper optimises and the run's closing line reports: `optimized_metric` when
    set, else the task's primary metric (`primary`)."""
    return cfg.optimized_metric or primary


_SCHEMA_NODES: dict[type, DictConfig] = {}


def schema_node(schema: type) -> DictConfig:
    """`OmegaConf.structured(schema)`, built once per schema class: a config node of a large schema
    takes ~25 ms to build from its dataclass and ~4 ms to copy. The node handed out is shared and
    read-only; `OmegaConf.merge(schema_node(S), given)` merges into a copy of it, which keeps the
    read-only flag until `OmegaConf.set_readonly(copy, None)` lifts it."""
    node = _SCHEMA_NODES.get(schema)
    if node is None:
        node = OmegaConf.structured(schema)
        OmegaConf.set_readonly(node, True)
        _SCHEMA_NODES[schema] = node
    return node


def typed_node(given: DictConfig, schema: type, prefix: str, whole: dict | None = None,
               open_keys: bool = False) -> DictConfig:
    """Merge the composed node `given` into `schema`, turning OmegaConf's errors into ConfigErrors
    that name the key. `whole`: the composed config, whose other sections an unknown key may belong
    to (algo.lr is optimizer.lr). `open_keys`: keys the schema does not declare are kept, untyped,
    instead of refused (the `reward` node of a task without a reward schema)."""
    base = schema_node(schema)
    if open_keys:
        base = OmegaConf.structured(schema)
        OmegaConf.set_struct(base, False)
    try:
        node = OmegaConf.merge(base, given)
    except ConfigKeyError as e:
        key = f"{prefix}{e.full_key}" if e.full_key else prefix.rstrip(".")
        where = key.rsplit(".", 1)[0] if "." in key else "the top level"
        leaf = key.rsplit(".", 1)[-1]
        allowed = _keys_at(schema, key[len(prefix):].rsplit(".", 1)[0] if "." in key[len(prefix):] else "")
        section = prefix.split(".")[0]
        there = sorted(f"{name}.{leaf}" for name, sub in (whole or {}).items()
                       if name != section and isinstance(sub, dict) and leaf in sub)
        hint = f"; {leaf!r} is a key of {there[0].rsplit('.', 1)[0]}: did you mean {there[0]!r}?" if there \
            else did_you_mean(leaf, allowed)
        raise ConfigError(f"unknown config key {key!r}; keys allowed in {where}: {', '.join(allowed)}{hint}") from None
    except ValidationError as e:
        key = f"{prefix}{e.full_key}"
        raise ConfigError(f"{key}={e.value!r} has the wrong type: {str(e).splitlines()[0]}") from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"bad config under {prefix.rstrip('.') or 'the top level'}: {e}") from None
    if not isinstance(node, DictConfig):        # a list merged into a schema's node: OmegaConf refuses it above
        raise ConfigError(f"bad config under {prefix.rstrip('.') or 'the top level'}: not a node of keys")
    OmegaConf.set_readonly(node, None)        # the merged copy is the caller's own
    return node


def _keys_at(schema: type, dotted: str) -> list[str]:
    node: Any = schema_node(schema)         # a node of the schema, or a list of its models, or a leaf value
    for part in [p for p in dotted.split(".") if p]:
        if part.isdigit():
            node = node[int(part)] if len(node) > int(part) else OmegaConf.structured(ModelSchema)
        else:
            child = node[part] if part in node else None
            if child is None or not OmegaConf.is_config(child):
                sub = {"lora": LoraSchema, "models": ModelSchema}.get(part)
                child = OmegaConf.structured(sub) if sub else child
            node = child
    if OmegaConf.is_list(node):
        node = OmegaConf.structured(ModelSchema)
    return sorted(str(k) for k in node.keys()) if OmegaConf.is_dict(node) else []
