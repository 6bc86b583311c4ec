"""Symmetries of a game, and Other-Play: training under random relabellings of them.

A symmetry is a relabelling the game's reward does not see: the option letters of `agree`, the
colour names of `convention`, the channel's symbols in `signal`. A task declares its own with
`Task.symmetries()`, as data: each a `Symmetry` naming the interchangeable symbols, what a symbol
is in text (`unit`: one letter, wherever it appears, or a whole word) and where the relabelling
acts (`acts_on`: the agents' answers, the prompts they read, or both). The contract, checked by
`magrpo.tasks.check.check_task` on random answers: for every permutation phi of the symbols,

    R(phi(prompts), phi(answers)) = R(prompts, answers)

(phi applied alike to every agent, where the symmetry acts). `Task.relabel` applies one; a game
that reads its moves in its own way (the first letter's run of the alphabet, say) overrides it.

Other-Play (Hu, Lerer, Peysakhovich, Foerster, "Other-Play for Zero-Shot Coordination", ICML
2020, arXiv 2003.02979) trains a team on the game with each partner's view relabelled by a random symmetry:

    max_pi  E_{phi ~ Phi}  J(pi^1, phi(pi^2))                                   (OP, their eq. 2)

Here (`algo.other_play=true`) every training item is given one view per agent: agent 1 plays
the game as it is, agent k >= 2 under its own phi_k drawn afresh per item (and per step). Agent k
reads phi_k(prompt) (where the symmetry acts on prompts) and its answer is read back as
phi_k^{-1}(answer) (where it acts on answers) before the reward sees it. A convention that rests
on an arbitrary name, one of the interchangeable symbols, no longer pays, because each partner's
name for it is drawn afresh; what survives is what the symmetries leave alone (a focal option that
is not among them), which is what a partner the team never met can also find. Evaluation plays
the game as it is.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from magrpo.tasks.base import Item, Scores, Task
from magrpo.tasks.relabel import Symmetry

# The key of an item that carries each agent's view under Other-Play (None: the game as it is).
VIEW_KEY = "other_play_view"


# -- Other-Play views ----------------------------------------------------------------------------------
View = list[tuple[str, ...]]        # one permutation per symmetry of the task


def draw_views(symmetries: Sequence[Symmetry], num_agents: int, rng: random.Random) -> list[View | None]:
    """One view per agent: agent 1 plays the game as it is (None), agent k >= 2 a random relabelling."""
    return [None] + [[s.draw(rng) for s in symmetries] for _ in range(num_agents - 1)]


def with_views(items: Sequence[dict], symmetries: Sequence[Symmetry], num_agents: int,
               rng: random.Random) -> list[dict]:
    """Copies of `items`, each carrying a fresh draw of every agent's view (`VIEW_KEY`)."""
    return [{**it, VIEW_KEY: draw_views(symmetries, num_agents, rng)} for it in items]


class OtherPlay(Task):
    """Mixed into a task's class by `other_play` (before it: its methods call the task's own through
    `super()`): agent k reads its prompts in its own view and its answers are read back to the game's
    own labels before the reward sees them. An item without a view (every evaluation item) is played
    as it is."""

    def _views(self, item: Item) -> list[View | None] | None:
        return item.get(VIEW_KEY)

    def _map(self, text: str, view: View | None, place: str, agent: int, back: bool = False) -> str:
        """`text` of agent `agent` into its view, or (`back`) from its view into the game's labels."""
        if not view:
            return text
        pairs = list(zip(self.symmetries(), view))
        for sym, perm in (reversed(pairs) if back else pairs):
            if sym.acts(place):
                text = self.relabel(text, sym, sym.inverse(perm) if back else tuple(perm), place, agent)
        return text

    def prompts(self, item: Item, num_agents: int) -> list[str]:
        out = super().prompts(item, num_agents)
        views = self._views(item)
        if not views or num_agents == 1:
            return out
        return [self._map(p, views[k], "prompt", k) for k, p in enumerate(out)]

    def context_prompt(self, item: Item, agent: int, prompt: str, own: str | None, others: dict[int, str]) -> str:
        views = self._views(item)
        if not views:
            return super().context_prompt(item, agent, prompt, own, others)
        mine = views[agent]
        base = super().context_prompt(
            item, agent, self._map(prompt, mine, "prompt", agent, back=True),
            None if own is None else self._map(own, mine, "answer", agent, back=True),
            {j: self._map(t, views[j], "answer", j, back=True) for j, t in others.items()})
        # The game's own text (every answer in it in the game's labels) shown in the agent's view: the
        # symmetries that act on prompts relabel all of it; a letter relabelling (answers only) leaves
        # the partners' answers quoted in it as the game reads them.
        return self._map(base, mine, "prompt", agent)

    def score(self, items: Sequence[Item], prompts: list[list[str]], completions: list[list[str]]) -> Scores:
        if not any(self._views(it) for it in items):
            return super().score(items, prompts, completions)
        canon_prompts: list[list[str]] = []
        canon_answers: list[list[str]] = []
        plain: list[Item] = []
        for it, row_p, row_c in zip(items, prompts, completions):
            views: list[View | None] = self._views(it) or [None] * len(row_c)
            views = views if len(views) == len(row_c) else [None] * len(row_c)    # the single-model form
            canon_prompts.append([self._map(p, v, "prompt", k, back=True) for k, (p, v) in enumerate(zip(row_p, views))])
            canon_answers.append([self._map(c, v, "answer", k, back=True) for k, (c, v) in enumerate(zip(row_c, views))])
            plain.append({k: v for k, v in it.items() if k != VIEW_KEY})
        return super().score(plain, canon_prompts, canon_answers)


_CLASSES: dict[type[Task], type[Task]] = {}


def other_play(task: Task) -> Task:
    """`task` (an instance) as one that honours Other-Play views: the same state, its class with
    `OtherPlay` mixed in. A task that declares no symmetry is refused (a ValueError naming it)."""
    if not task.symmetries():
        raise ValueError(f"task {task.name!r} declares no symmetry (Task.symmetries), so Other-Play has nothing to "
                         f"relabel")
    cls = type(task)
    if issubclass(cls, OtherPlay):
        return task
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"OtherPlay{cls.__name__}", (OtherPlay, cls), {"__module__": cls.__module__})
    out: Task = object.__new__(_CLASSES[cls])
    out.__dict__.update(task.__dict__)
    return out


__all__ = ["OtherPlay", "Symmetry", "VIEW_KEY", "draw_views", "other_play", "with_views"]
