"""Process-wide defaults a command sets before torch loads.

Each command module (`magrpo-train`, `magrpo-eval`, ...) imports this first; `import magrpo` itself
changes nothing in the environment. Idle OpenMP threads sleep instead of spinning: on small shared
CPU machines spinning threads slowed generation up to 40x under load (scripts/bench.py
measurements). An explicit OMP_WAIT_POLICY in the environment wins.
"""

from __future__ import annotations

import os

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


def apply() -> None:
    """Set each default the environment does not set already."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)


apply()
