"""The coordination suite's harder games: each measures one thing a credit-assignment method claims.

  convention  agree on one of K named options whose letters are shuffled per item and per agent:
              no letter is a focal point, so the team must learn a rule from what it reads.
  stag_hunt   a mixed-motive game: hunting the stag together pays most, but a hare pays an agent
              alone whatever the others do; learning from individual rewards lands on the hare.
  budget_signal  Lewis signalling with K >= 4 objects where the speaker pays for every character
              past a small budget: the team must learn a short code.
  invest      credit over turns: the first turn earns nothing but sets what the second can earn.
  crowd       cover for a large team: 8 agents take 8 of 16 parts; every agent's move counts.
  lever       zero-shot coordination: K - 1 levers pay alike and one odd lever a little less; a
              team settles on a best lever by chance, the odd one is what any partner finds (Other-Play's game).

Moves are read as in the rest of the suite (magrpo.tasks.coordination): an option letter, or the
run of the alphabet an answer's first letter falls in, so a random-init model moves from the
first step and the rewards are graded.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from magrpo.core.schema import ConfigError, at_least, option, within
from magrpo.tasks import register_task
from magrpo.tasks.base import Item, Scores
from magrpo.tasks.coordination import (
    LABELS,
    CoordinationTaskConfig,
    CoverTask,
    CoverTaskConfig,
    SignalTask,
    SignalTaskConfig,
    _Game,
    pair_agreement,
    past,
    pick,
    team_moves,
)
from magrpo.tasks.metrics import mutual_information
from magrpo.tasks.symmetry import Symmetry

WORD = re.compile(r"[A-Za-z]\S*")     # a word of an answer, from its first letter (the lever game)
WORDS = ["red", "blue", "green", "gold", "pink", "gray", "teal", "plum"]


def first_letter_run(text: str, runs: int) -> int | None:
    """Which of `runs` equal runs of the alphabet the answer's first letter is in (None: no letter)."""
    m = re.search("[a-z]", text.lower())
    return None if m is None else (ord(m.group(0)) - ord("a")) * runs // 26


# -- convention -----------------------------------------------------------------------------------

@dataclass
class ConventionTaskConfig(CoordinationTaskConfig):
    name: str = "convention"
    num_options: int = at_least(2, 4,
                                help="K named options (at most 8), each under a letter shuffled per agent")
    order: str = option("rotation", choices=("rotation", "shuffle"),
                        help="how each agent's letters are dealt: rotation = the colour wheel turned "
                             "by a random step per item and agent (learnable by the tiny agents); "
                             "shuffle = any order (harder: the colour must be found anywhere)")


@register_task("convention")
class ConventionTask(_Game):
    """Agree on a named option when every agent sees the options under its own shuffled letters.

    Each item lists K colours; each agent reads them in an order of its own (drawn per item and
    agent) with the letters a, b, ... in that order, and picks a letter. The team is paid, as in
    `agree`, the share of agent pairs whose letters name the same colour.

    The order is the colour wheel turned by a random step (`order: rotation`, the default), or any
    permutation (`order: shuffle`). Either way each letter names each colour equally often, so no
    letter is a focal point. Under a rotation an agent can tell its step from the first colour it
    reads, which the tiny agents can learn to use; under a shuffle the chosen colour must be found
    wherever it is listed, a copy the tiny agents do not learn at the default budget.

    What it measures: whether the team can learn a convention that lives in what each agent reads.
    In `agree` a tiny model's favourite letter is a focal point that every seed converges to; here
    a fixed letter names a random colour, so it scores chance (1/K per pair). The team must map its
    own listing to a shared choice (find "red", answer its letter). A method fails it when it only
    reinforces a letter bias, or when the agents settle on different colours.
    """

    name = "convention"
    agent_counts = tuple(range(1, 9))
    splits_reward = True
    passed_metric = "all_agree"
    config_schema = ConventionTaskConfig
    cfg: ConventionTaskConfig

    def item_fields(self, rng: random.Random, index: int) -> dict[str, Any]:
        return {"order_seed": rng.randrange(2**31)}

    def order(self, item: Item, agent: int) -> list[str]:
        """The colours in the order agent `agent` reads them (its letter k names order[k])."""
        words = WORDS[:self.cfg.num_options]
        rng = random.Random(f"{item['order_seed']}/{agent}")
        if self.cfg.order == "shuffle":
            return rng.sample(words, len(words))
        step = rng.randrange(len(words))
        return words[step:] + words[:step]

    def symmetries(self) -> tuple[Symmetry, ...]:
        # the colours are interchangeable names; the answer is a letter, read through the listing
        return (Symmetry("colours", tuple(WORDS[:self.cfg.num_options]), "word", "prompts"),)

    def listing(self, item: Item, agent: int) -> str:
        return " ".join(f"{LABELS[k]}={w}" for k, w in enumerate(self.order(item, agent)))

    # Each prompt ends with its listing, what the agent's move depends on (as signal's prompts end with
    # the object): under a rotation its last colour tells the step.
    def team_prompts(self, item: Item, num_agents: int) -> list[str]:
        return [f"Team of {num_agents}. Every agent picks one colour; the team scores when all pick the same "
                f"colour. Answer with your letter for it. Your letters: {self.listing(item, i)}"
                for i in range(num_agents)]

    def single_prompt(self, item: Item) -> str:
        n = self.cfg.num_team
        return (f"Team of {n}. Write one letter per agent, {n} letters; the team scores when they name the same "
                f"colour. Letters: {self.listing(item, 0)}")

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: Any) -> Scores:
        moves = team_moves(completions, self.labels, self.cfg.num_team)
        raw, shares, agreed = [], [], []
        for m, joint, seed in zip(moves, completions, cols["order_seed"]):
            item = {"order_seed": seed}
            single = len(joint) == 1            # one model wrote every pick, reading agent 1's listing
            names = [None if x is None else self.order(item, 0 if single else i)[LABELS.index(x)]
                     for i, x in enumerate(m)]
            r, s = pair_agreement(names)
            raw.append(r)
            shares.append(s)
            agreed.append(None not in names and len(set(names)) == 1)
        return self.team_scores(raw, {"agreement": raw}, agreed, shares)


# -- stag hunt ------------------------------------------------------------------------------------

@dataclass
class StagHuntTaskConfig(CoordinationTaskConfig):
    name: str = "stag_hunt"
    num_options: int = at_least(2, 2)
    hare: float = option(0.6, check=lambda v: 0 < v < 1, allowed="in (0, 1)",
                         help="a hare's pay, whatever the others do; the stag "
                              "pays 1, and only when every agent hunts it")


@register_task("stag_hunt")
class StagHuntTask(_Game):
    """A stag hunt in words: each agent hunts the stag (an answer whose first letter is in n-z, as
    "stag") or a hare (a-m, as "hare").

    The stag pays each agent 1, but only when every agent hunts it; a hare pays its hunter `hare`
    (0.6) whatever the others do. The team reward is the mean of the agents' pays, so the team
    optimum (1) is all stag, and all hare is a worse equilibrium (0.6).

    What it measures: whether a method optimizes the team's return or each agent's own. Trained on
    individual rewards (`algo.reward=individual`), an agent at the start (the others hunt the stag
    half the time) earns 0.5 for the stag and 0.6 for a hare, so it learns the hare, and the hare
    only gets safer as the others learn it too: independent learners land on the worse equilibrium.
    On the team reward the stag is worth more to the team from the start (1.3 against 0.9 for two
    agents), so team-reward methods can find it.

    The normalized return counts from the hare: (R - hare) / (1 - hare), at least 0, so a team
    that hunts hares (the safe equilibrium, open to agents that ignore one another) or
    miscoordinates scores 0, and all stag 1; the raw reward R stays the mean pay.
    """

    name = "stag_hunt"
    agent_counts = tuple(range(1, 9))
    splits_reward = True
    passed_metric = "all_stag"
    config_schema = StagHuntTaskConfig
    cfg: StagHuntTaskConfig

    def team_prompts(self, item: Item, num_agents: int) -> list[str]:
        return [f"Team of {num_agents} hunters, {item['scene']}. The stag feeds everyone well, but only if every "
                f"hunter goes for it; a hare feeds one hunter a little, always. You are hunter {i + 1}. "
                f"Stag or hare?" for i in range(num_agents)]

    def single_prompt(self, item: Item) -> str:
        n = self.cfg.num_team
        return f"Team of {n} hunters, {item['scene']}. For each hunter, one word per line: stag or hare."

    def moves(self, joint: list[str]) -> list[bool | None]:
        """True: the stag (first letter n-z), False: a hare (a-m), None: no letter."""
        texts = joint if len(joint) > 1 else (re.findall(r"[A-Za-z]\S*", joint[0])[:self.cfg.num_team]
                                              + [""] * self.cfg.num_team)[:self.cfg.num_team]
        runs = [first_letter_run(t, 2) for t in texts]
        return [None if r is None else r == 1 for r in runs]

    def normalized_return(self, reward: float, num_answers: int) -> float | None:
        """Past the hare, as a fraction of the way to the stag: (R - hare) / (1 - hare), at least 0,
        R the mean pay as a fraction of the optimum (1)."""
        return past(super().normalized_return(reward, num_answers), self.cfg.hare)

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: Any) -> Scores:
        raw, shares, stag, share_of_stag = [], [], [], []
        for joint in completions:
            m = self.moves(joint)
            all_stag = all(x is True for x in m)
            pay = [1.0 if (x is True and all_stag) else self.cfg.hare if x is False else 0.0 for x in m]
            raw.append(sum(pay) / len(pay))
            shares.append([p / len(pay) for p in pay])          # the team reward is the mean pay
            stag.append(all_stag)
            share_of_stag.append(sum(x is True for x in m) / len(m))
        return self.team_scores(raw, {"stag_share": share_of_stag}, stag, shares)


# -- communication under a budget -----------------------------------------------------------------

@dataclass
class BudgetSignalTaskConfig(SignalTaskConfig):
    name: str = "budget_signal"
    num_options: int = at_least(4, 4, help="objects (at least 4)")
    budget: int = at_least(1, 2, help="characters of the speaker's message that cost nothing")
    cost: float = within(0.0, 1.0, 0.1, help="pay lost per character past the budget (the pay stays >= 0)")


@register_task("budget_signal")
class BudgetSignalTask(SignalTask):
    """Lewis signalling with K >= 4 objects and a price on talk: the speaker loses `cost` of the pay
    for every character of its message past `budget`.

    What it measures: whether the team learns a code that is both shared and short. The symbol is
    still the message's first letter, so the information fits in one character; the rest is cost.
    It reports `message_chars` (the speaker's mean message length) and `listener_info_bits`, the
    mutual information between the secret object and the listener's answer over the evaluation
    (log2 K bits for a perfect code, 0 for guessing). A method fails it when the speaker stops
    talking before a code forms (shortness learned first), or when the code never forms.
    """

    name = "budget_signal"
    config_schema = BudgetSignalTaskConfig
    cfg: BudgetSignalTaskConfig

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: Any) -> Scores:
        base = super().reward(prompts, completions, **cols)
        raw, chars = [], []
        for joint, ok in zip(completions, base.extras["passed"]):
            n = len(joint[0].strip()) if len(joint) > 1 else 0
            chars.append(float(n))
            raw.append(float(ok) * max(0.0, 1.0 - self.cfg.cost * max(0, n - self.cfg.budget)))
        return Scores(self.compose(raw), {**base.components, "message_chars": chars},
                      {**base.extras, "passed": [r > 0 for r in raw]})

    def metrics(self, items: Sequence[Item], completions: list[list[str]], scores: Scores) -> dict[str, float]:
        out = super().metrics(items, completions, scores)
        if not len(scores):
            return out
        pairs = [(it["target"], self.move(joint[-1])) for it, joint in zip(items, completions)]
        out["listener_info_bits"] = mutual_information(pairs)
        out["message_chars"] = sum(scores.components["message_chars"]) / len(scores)
        return out


# -- credit over turns ----------------------------------------------------------------------------

@dataclass
class InvestTaskConfig(CoordinationTaskConfig):
    name: str = "invest"
    low: float = within(0.0, 1.0, 0.25, help="what agreeing at a later turn pays after a low first move")


@register_task("invest")
class InvestTask(_Game):
    """Credit over turns (play with `algo.num_turns` >= 2): the first turn pays nothing, but agent
    1's first move (`a`-`d` of K = 8 letters: high; the others: low) sets what every later turn can
    pay. From turn 2 on the team is paid, as in `agree`, the share of agent pairs that pick the same
    letter, times 1 after a high first move and `low` (0.25) after a low one.

    What it measures: whether a method carries a later reward back to the move that made it
    possible. A return R = r + discount * mean(children's R) credits the first move with what its
    turn-2 children earned; a method that compares first moves on their own turn's reward (always
    0 here: AT-GRPO's `branch=best` sees equal rewards) has nothing to learn the first move from,
    and ends near the low cap.
    """

    name = "invest"
    agent_counts = tuple(range(1, 9))
    splits_reward = True
    passed_metric = "high_and_agreed"
    config_schema = InvestTaskConfig
    cfg: InvestTaskConfig
    HIGH = "abcd"

    def team_prompts(self, item: Item, num_agents: int) -> list[str]:
        return [f"Team of {num_agents}, {item['scene']}. You are agent {i + 1}. First agent 1 chooses a plan "
                f"from {self.options_text()}; then every agent picks one letter, and the team scores when all "
                f"pick the same. Your letter:" for i in range(num_agents)]

    def single_prompt(self, item: Item) -> str:
        n = self.cfg.num_team
        return f"Team of {n}, {item['scene']}. Write one letter per agent, {n} letters from {self.options_text()}:"

    def revise_instruction(self, item: Item, agent: int, num_agents: int) -> str:
        return "Now pick your letter again; the team scores when all pick the same. Your letter:"

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: Any) -> Scores:
        histories = cols.get("turn_history") or [None] * len(completions)
        moves = team_moves(completions, self.labels, self.cfg.num_team)
        raw, shares, passed = [], [], []
        for m, history in zip(moves, histories):
            if not history:                           # the first turn: the plan, paid later
                raw.append(0.0)
                shares.append([0.0] * len(m))
                passed.append(False)
                continue
            first = team_moves([history[0]], self.labels, self.cfg.num_team)[0][0]
            cap = 1.0 if first is not None and first in self.HIGH else self.cfg.low
            r, s = pair_agreement(m)
            raw.append(cap * r)
            shares.append([cap * x for x in s])
            passed.append(cap == 1.0 and r == 1.0)
        return self.team_scores(raw, {"paid": raw}, passed, shares)


# -- zero-shot coordination: the lever game -------------------------------------------------------

@dataclass
class LeverTaskConfig(CoordinationTaskConfig):
    name: str = "lever"
    num_options: int = at_least(3, 5, help="K levers; lever 1 is the odd one, the other K - 1 pay the same")
    odd_pay: float = within(0.0, 1.0, 0.9,
                            help="what lever 1 pays when every agent pulls it; the others pay 1")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        if node.num_options > 13:
            raise ConfigError(f"{prefix}num_options={node.num_options}: a lever needs at least 2 letters of the "
                              f"alphabet; choose 3..13")


@register_task("lever")
class LeverTask(_Game):
    """The lever game of Other-Play (Hu et al., ICML 2020), played with first letters: K levers, and
    the team is paid when its agents pull the same one. An agent pulls lever (i mod K) + 1, i the
    position in the alphabet of its answer's first letter (a = 0): with K = 5, lever 1 is a, f, k,
    p, u, z. Lever 1 pays `odd_pay` (0.9); the other K - 1 pay 1 and are interchangeable. The team is
    paid, as in `agree`, the share of agent pairs that pulled the same lever, each pair at that
    lever's pay.

    What it measures: zero-shot coordination. The letters of a lever are spread over the alphabet,
    so an untrained agent pulls every lever about as often, and a team that trains together settles
    on one of the K - 1 best levers by chance: which one depends on the run, and a team from another
    seed has likely settled on another (cross-play near 1/(K - 1)). The odd lever is the one answer
    that every agent can tell apart on its own: an agent that pulls it scores 0.9 with any partner
    that does. Other-Play (`algo.other_play=true`: the K - 1 levers are relabelled at random for each
    partner, `symmetries`) makes each best lever worth 1/(K - 1) in expectation and leaves the odd
    one at 0.9, so it learns the odd lever.
    """

    name = "lever"
    agent_counts = tuple(range(1, 9))
    splits_reward = True
    passed_metric = "all_agree"
    config_schema = LeverTaskConfig
    cfg: LeverTaskConfig

    def move(self, text: str) -> int | None:
        """The lever an answer pulls (0 = lever 1): its first letter's position, mod K (None: no letter)."""
        m = re.search("[a-z]", text.lower())
        return None if m is None else (ord(m.group(0)) - ord("a")) % self.cfg.num_options

    def symmetries(self) -> tuple[Symmetry, ...]:
        # The K - 1 levers that pay alike, each named by its first letter (b, c, ...; `relabel` moves a
        # whole lever, whichever of its letters an answer starts with).
        return (Symmetry("levers that pay alike", tuple(LABELS[1:self.cfg.num_options]), "letter", "answers"),)

    def relabel(self, text: str, symmetry: Symmetry, perm: Sequence[str], place: str, agent: int = 0) -> str:
        """An answer with lever symbols[i] pulled instead as lever perm[i]: the first letter of each of
        its words (what pulls a lever) moved by the levers' difference, within the alphabet."""
        if place != "answer":
            return text
        K = self.cfg.num_options
        to = {LABELS.index(a): LABELS.index(b) for a, b in zip(symmetry.symbols, perm)}

        def move(m: re.Match) -> str:
            i = ord(m.group(0)[0].lower()) - ord("a")
            j = i - i % K + to.get(i % K, i % K)
            letter = chr(ord("a") + (j - K if j > 25 else j))
            return (letter.upper() if m.group(0)[0].isupper() else letter) + m.group(0)[1:]

        return WORD.sub(move, text)

    def team_prompts(self, item: Item, num_agents: int) -> list[str]:
        K = self.cfg.num_options
        return [f"Team of {num_agents}, {item['scene']}. You are agent {i + 1}. Levers 1 to {K}: your answer's first "
                f"letter pulls one (a, b, c ... count 1, 2, 3 ... round {K}). Lever 1 pays {self.cfg.odd_pay:g} when "
                f"every agent pulls it; any other pays 1 when every agent pulls that same one. Your lever:"
                for i in range(num_agents)]

    def single_prompt(self, item: Item) -> str:
        n, K = self.cfg.num_team, self.cfg.num_options
        return (f"Team of {n}, {item['scene']}. Levers 1 to {K}, each pulled by a word's first letter (a, b, c ... "
                f"count 1, 2, 3 ... round {K}); lever 1 pays {self.cfg.odd_pay:g}, the others 1, when every agent "
                f"pulls the same. Write one word per agent, {n} words:")

    def moves_of(self, joint: list[str]) -> list[int | None]:
        if len(joint) > 1:
            return [self.move(t) for t in joint]
        words = WORD.findall(joint[0])[:self.cfg.num_team]        # the single form: one word per agent
        return [self.move(w) for w in words] + [None] * (self.cfg.num_team - len(words))

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols: Any) -> Scores:
        raw, shares, agreed, odd = [], [], [], []
        for joint in completions:
            levers = self.moves_of(joint)
            n = len(levers)
            pay = [0.0 if c is None else (self.cfg.odd_pay if c == 0 else 1.0) for c in levers]
            if n == 1:
                mine = [pay[0]]
            else:
                mine = [sum(pay[i] for j in range(n) if j != i and levers[j] == levers[i]) / (n * (n - 1))
                        for i in range(n)]
            raw.append(sum(mine))
            shares.append(mine)
            agreed.append(None not in levers and len(set(levers)) == 1)
            odd.append(sum(c == 0 for c in levers) / n)
        return self.team_scores(raw, {"agreement": raw, "odd_lever": odd}, agreed, shares)


# -- a large team ---------------------------------------------------------------------------------

@dataclass
class CrowdTaskConfig(CoverTaskConfig):
    name: str = "crowd"
    num_options: int = at_least(2, 16, help="K parts (at most 16)")
    needed: str = option("bdfhjlnp", help="the parts worth taking, one per agent (the first N are used)")
    num_team: int = at_least(1, 8)

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        CoverTaskConfig.check_node(node, prefix)


@register_task("crowd")
class CrowdTask(CoverTask):
    """`cover` for a large team: 8 agents each take one of 16 parts, 8 of them needed; the team is
    paid 1/8 per needed part taken (once).

    What it measures: per-agent credit in a big team. The reward depends on every agent's move,
    and one agent's change moves it by 1/8 at most, so a method whose advantage does not separate
    the agents' contributions gets a weak, noisy signal per agent.
    """

    name = "crowd"
    num_agents = 8
    agent_counts = tuple(range(1, 9))
    config_schema = CrowdTaskConfig
    cfg: CrowdTaskConfig


__all__ = ["BudgetSignalTask", "ConventionTask", "CrowdTask", "InvestTask", "LeverTask", "StagHuntTask", "mutual_information",
           "pair_agreement", "pick"]
