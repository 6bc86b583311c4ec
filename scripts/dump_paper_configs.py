"""Compose every paper row (table x task x row) at scale=tiny and scale=paper and write each config
as OmegaConf.to_yaml, one file per row and scale, to compare two versions of conf/ byte for byte:

    python scripts/dump_paper_configs.py OUT
    diff -r OUT_BEFORE OUT_AFTER            # empty: every row composes to the same config

Each row composes `recipe=<task> method=<row>`; run it on two checkouts and diff the folders."""

from __future__ import annotations

import sys
from pathlib import Path


def rows() -> list[tuple[str, str, str]]:
    """(task, row, entry) of every table."""
    try:
        from magrpo.launch.paper_grid import METHODS, TABLES
    except ImportError:     # before magrpo.launch.paper_grid: the rows were magrpo.cli.paper's
        from magrpo.cli.paper import TABLES as OLD

        return [(task, r.name, r.entry) for t in OLD.values() for task in t.tasks for r in t.rows
                if (task, r.name) not in t.skip]
    return [(task, row, METHODS[row].entry) for t in TABLES.values() for task, row in t.cells()]


def main(out: Path) -> int:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from magrpo.config.schemas import CONF_DIR
    from magrpo.validation.store import register_schemas

    register_schemas()
    out.mkdir(parents=True, exist_ok=True)
    found = rows()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for task, row, entry in found:
            for scale in ("tiny", "paper"):
                chosen = [f"recipe={task}", f"method={row}"]
                cfg = compose(config_name="eval" if entry == "eval" else "train", overrides=[*chosen, f"scale={scale}"])
                (out / f"{task}__{row}__{scale}.yaml").write_text(OmegaConf.to_yaml(cfg))
    print(f"{len(found)} rows x 2 scales -> {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
