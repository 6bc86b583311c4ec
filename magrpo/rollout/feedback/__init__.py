"""Feedback between turns: what each agent is shown about the team's joint answer before it answers again.

`feedback.mode` (the `feedback` config group, one YAML per mode under conf/feedback/) picks one
class registered here. A mode turns a scored joint action (a `NodeView`) into one user message
per agent; the turn tree (magrpo.rollout.turns) appends that agent's own answer and this message to the
agent's conversation, so an agent's history holds only its own prompts and answers plus the
feedback it is shown (decentralised execution).

    none         no feedback: the agent is only asked to answer again (a self-refinement control)
    plain        the agent's own previous answer and an instruction to revise it
    passed       whether the joint answer passed (tests, every reward level, a correct answer)
    diagnostics  what the reward found, per task family (feedback/diagnostics.py)
    expert       a reviewer model's suggested edits: an OpenAI-compatible endpoint or a local
                 model (feedback/expert.py); a failure falls back to `plain` for that item
    discussion   the other agents' previous answers (MAPoRL)

Each message ends with the task's `revise_instruction` (the format its reward expects).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from magrpo.config.groups import FeedbackConfig
from magrpo.core.instances import as_data, instance
from magrpo.core.registry import Registry, registrar
from magrpo.core.schema import ConfigError

FEEDBACKS: Registry[type[Feedback]] = Registry("feedback mode", "feedback.mode", set_name=True, builtins=(
    "magrpo.rollout.feedback.diagnostics", "magrpo.rollout.feedback.expert"))


register_feedback = registrar(FEEDBACKS)




@dataclass
class NodeView:
    """One scored joint action as feedback sees it."""

    item: dict[str, Any]
    prompts: list[str]                 # each agent's prompt (plain text of its conversation)
    answers: list[str]                 # each agent's answer
    reward: float
    components: dict[str, float]
    extras: dict[str, Any]             # the reward's per-answer diagnostics (Scores.extras, this row)
    turn: int


class Feedback:
    """Base class: `message(view, agent)` is what `agent` reads before its next answer."""

    name: ClassVar[str] = ""
    config_schema: ClassVar[type[FeedbackConfig]] = FeedbackConfig

    def __init__(self, cfg: FeedbackConfig | Mapping[str, object] | None, task: Any):
        from omegaconf import OmegaConf  # noqa: PLC0415  start-up: the tasks and feedback modes load without OmegaConf

        # The mode's schema's instance: its defaults under whatever was given (the validated
        # `feedback` group, a dict such as {"mode": "plain"}, None), merged (and so type-checked)
        # by OmegaConf. A mode whose schema adds keys declares `cfg: ItsConfig`.
        given = OmegaConf.create(as_data(cfg)) if cfg else {}
        merged = OmegaConf.merge(OmegaConf.structured(self.config_schema), given)
        self.cfg: FeedbackConfig = instance(merged, self.config_schema)
        self.task = task
        self.degraded = 0              # items that fell back to plain feedback (expert), over the run
        known = self.kinds()
        kind = getattr(task, "feedback_kind", "generic")
        if known is not None and kind not in known:
            raise ConfigError(f"feedback={self.name or type(self).__name__}: task {getattr(task, 'name', task)!r} "
                              f"declares feedback_kind={kind!r}, which this mode has no words for; known kinds: "
                              f"{', '.join(sorted(known))} (set the task's feedback_kind to one of them)")

    @classmethod
    def kinds(cls) -> Any:
        """The task families (`Task.feedback_kind`) this mode words its message for; None = any."""
        return None

    def kind(self) -> str:
        """The task's family, checked against `kinds()` when the mode was built."""
        return getattr(self.task, "feedback_kind", "generic")

    def __call__(self, views: list[NodeView]) -> list[list[str]]:
        """[node][agent] messages for a batch of nodes (a mode that calls a model batches here)."""
        return [[self.message(v, i) for i in range(len(v.answers))] for v in views]

    def message(self, view: NodeView, agent: int) -> str:
        raise NotImplementedError

    def instruction(self, view: NodeView, agent: int) -> str:
        return self.task.revise_instruction(view.item, agent, len(view.answers))


@register_feedback("none")
class NoFeedback(Feedback):
    def message(self, view: NodeView, agent: int) -> str:
        return self.instruction(view, agent)


@register_feedback("plain")
class PlainFeedback(Feedback):
    def message(self, view: NodeView, agent: int) -> str:
        return ("Your previous answer is above. Check it for mistakes and for anything missing, then improve it.\n\n"
                + self.instruction(view, agent))


# What `passed` says, per task family (Task.feedback_kind): (passed, not passed).
PASS_TEXT = {
    "coding": ("The team's program passed all the tests.", "The team's program did not pass all the tests."),
    "writing": ("The team's answers met every level of the reward.",
                "The team's answers did not meet every level of the reward."),
    "math": ("Every agent's answer was correct.", "Not every agent's answer was correct."),
    "generic": ("The team's answer passed.", "The team's answer did not pass."),
}


def passed_of(view: NodeView) -> bool | None:
    """Did the joint answer pass: the reward's own `passed` flag, or every writing level met."""
    if view.extras.get("passed") is not None:
        return bool(view.extras["passed"])
    if view.extras.get("levels_passed") is not None:
        return view.extras["levels_passed"] >= 4
    return None


@register_feedback("passed")
class PassedFeedback(Feedback):
    @classmethod
    def kinds(cls) -> Any:
        return PASS_TEXT

    def message(self, view: NodeView, agent: int) -> str:
        ok = passed_of(view)
        yes, no = PASS_TEXT[self.kind()]
        verdict = (yes if ok else no) if ok is not None else f"The team's answer scored {view.reward:.3f}."
        return f"{verdict}\n\n{self.instruction(view, agent)}"


@register_feedback("discussion")
class DiscussionFeedback(Feedback):
    """MAPoRL: each agent reads the other agents' previous answers before answering again."""

    def message(self, view: NodeView, agent: int) -> str:
        others = [f"Agent {j + 1}'s answer:\n{a.strip()}" for j, a in enumerate(view.answers) if j != agent]
        if not others:
            return self.instruction(view, agent)
        return ("The other agents answered the same task:\n\n" + "\n\n".join(others)
                + "\n\nThey may be right or wrong. Weigh their reasoning against yours.\n\n"
                + self.instruction(view, agent))


def build_feedback(cfg: FeedbackConfig | Mapping[str, object] | None, task: Any) -> Feedback:
    """The mode `cfg.mode` names (none when `cfg` is empty), configured by `cfg`: the validated
    `feedback` node, or a plain dict such as {"mode": "plain"}."""
    # a dict without a mode, or None: FeedbackConfig's own (none)
    mode = cfg.mode if isinstance(cfg, FeedbackConfig) else str((cfg or {}).get("mode") or FeedbackConfig.mode)
    if mode not in FEEDBACKS:
        raise ValueError(f"feedback.mode={mode!r} is not allowed; choose one of: {', '.join(sorted(FEEDBACKS))}")
    return FEEDBACKS[mode](cfg, task)


# Importing a module registers its modes.
from magrpo.rollout.feedback import diagnostics as _diagnostics  # noqa: E402,F401  isort: skip
from magrpo.rollout.feedback import expert as _expert  # noqa: E402,F401  isort: skip

__all__ = ["FEEDBACKS", "Feedback", "FeedbackConfig", "NodeView", "build_feedback", "passed_of", "register_feedback"]
