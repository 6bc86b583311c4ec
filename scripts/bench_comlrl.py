"""The comlrl side of scripts/bench.py (`--mode comlrl`): comlrl's MAGRPOTrainer on our setup.

Same local model weights (the agents bench.py already loaded), same tokenizer, same prompts
(the length_ratio prompts through comlrl's per-agent formatters), same reward (the length_ratio
reward behind comlrl's reward-function signature), same sampling (temperature, top_p, top_k,
max_new_tokens, num_generations, one turn, aligned joints), rollout_buffer_size =
train_batch_size = --batch, no evaluation, no W&B. Advantages are not normalised, matching
MAGRPO's default `algo.scale: none`.

comlrl trains one dataset item at a time (generate G per agent, reward, buffer) and updates an
agent when its buffer holds `rollout_buffer_size` items. A thin subclass times its three phases
(generation, reward, update) without changing what they do; share_other is the rest of its loop
(rollout-tree bookkeeping, buffer packing, the data loader).

Tested against comlrl 1.4.3 (pip install comlrl==1.4.3).
"""

from __future__ import annotations

import time
from typing import Any


def make_trainer_class():
    from comlrl.trainers.reinforce import MAGRPOTrainer

    class TimedMAGRPOTrainer(MAGRPOTrainer):
        """MAGRPOTrainer with phase timers and a completion-token counter; behaviour unchanged."""

        def reset_timers(self) -> None:
            self.bench = dict(generate=0.0, reward=0.0, update=0.0, tokens=0)

        def _generate_completions(self, agent, batch_items, agent_idx=0, **kwargs):
            import torch

            t0 = time.perf_counter()
            out = super()._generate_completions(agent, batch_items, agent_idx=agent_idx, **kwargs)
            self.bench["generate"] += time.perf_counter() - t0
            # Count tokens as MAGRPO does: up to and including the first EOS.
            ids = torch.stack(out["completion_input_ids"][0])
            self.bench["tokens"] += self.count_tokens(agent_idx, ids)
            return out

        def _compute_rewards(self, prompts, completions_list, batch_items=None):
            t0 = time.perf_counter()
            out = super()._compute_rewards(prompts, completions_list, batch_items=batch_items)
            self.bench["reward"] += time.perf_counter() - t0
            return out

        def _update_from_samples(self, agent_idx, samples):
            t0 = time.perf_counter()
            super()._update_from_samples(agent_idx, samples)
            self.bench["update"] += time.perf_counter() - t0

    return TimedMAGRPOTrainer


def reward_adapter(task: Any, num_agents: int):
    """comlrl calls reward(*per_agent_completions, batch_items=[item]) once per joint action, each
    argument a one-element list; answer with the length_ratio reward as a one-element list."""

    def reward(*agent_completions, batch_items=None):
        item = batch_items[0]
        joint = [c[0] for c in agent_completions]
        return list(task.score([item], [task.prompts(item, num_agents)], [joint]))

    return reward


def formatters(task: Any, agents: list) -> list:
    n = len(agents)
    return [lambda item, i=i, a=a: a.format_prompt(task.prompts(item, n)[i]) for i, a in enumerate(agents)]


def run_comlrl(args, cfg, agents, task, warm_items, timed_items, count_tokens) -> tuple[list[dict], dict]:
    """Timed passes of comlrl's training over `timed_items` after one untimed pass over
    `warm_items`; count_tokens(agent_index, completion_ids) counts tokens as bench.py does."""
    try:
        import comlrl
        from comlrl.trainers.reinforce import MAGRPOConfig
    except ImportError as e:
        raise SystemExit(f"--mode comlrl needs comlrl (pip install comlrl==1.4.3): {e}") from None
    from datasets import Dataset

    algo = cfg.algo
    config = MAGRPOConfig(
        num_train_epochs=1, agent_learning_rate=cfg.optimizer.lr, logging_steps=1,
        num_agents=len(agents), parallel_training="none", agent_devices=str(agents[0].device),
        num_generations=algo.num_generations, max_new_tokens=algo.max_new_tokens,
        temperature=algo.temperature, top_p=algo.top_p,
        # top_k=0 turns top-k off, as MAGRPO's 0 does; comlrl's None would leave the model's default of 50
        top_k=algo.top_k,
        num_turns=1, joint_mode=algo.joint_mode, early_termination_threshold=None,
        eval_interval=0, eval_num_samples=0,
        rollout_buffer_size=algo.batch_size, train_batch_size=algo.batch_size,
        advantage_normalization=False, advantage_mode=algo.advantage,
    )
    trainer = make_trainer_class()(
        agents=[a.model for a in agents], num_agents=len(agents), tokenizer=[a.tokenizer for a in agents],
        train_dataset=Dataset.from_list(warm_items or timed_items[:1]),
        reward_func=reward_adapter(task, len(agents)), formatters=formatters(task, agents),
        wandb_config=None, args=config,
    )
    trainer.verbose = False  # no tqdm bar on stderr
    trainer.count_tokens = count_tokens

    if warm_items:
        trainer.reset_timers()
        trainer.train()
    runs = []
    for _ in range(args.repeats):
        trainer.train_dataset = Dataset.from_list(timed_items)
        trainer.reset_timers()
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        b = trainer.bench
        runs.append(dict(seconds=wall, wall_s=wall, cpu_s=cpu, generate_s=b["generate"], reward_s=b["reward"],
                         update_s=b["update"], completion_tokens=b["tokens"]))
    return runs, {"comlrl": getattr(comlrl, "__version__", "unknown")}
