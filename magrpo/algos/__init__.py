"""Algorithm registry: `algo.name` picks the trainer class.

`grpo` is MAGRPO with one agent writing the whole joint answer (its config sets
`single_agent: true`), so both names map to the same class.
"""

from __future__ import annotations

from magrpo.algos.magrpo import MAGRPO

ALGOS = {
    "magrpo": MAGRPO,
    "grpo": MAGRPO,
}
