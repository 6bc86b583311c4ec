"""MAGRPO: multi-agent group relative policy optimization for teams of cooperating LLMs."""

import os

# Idle OpenMP threads sleep instead of spinning: on small shared CPU machines spinning threads
# slowed generation up to 40x under load (scripts/bench.py measurements). Set before torch loads;
# an explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"


def __getattr__(name: str):
    # `from magrpo import Team` without importing torch and transformers for every `import magrpo`.
    if name == "Team":
        from magrpo.team import Team

        return Team
    raise AttributeError(f"module 'magrpo' has no attribute {name!r}")
