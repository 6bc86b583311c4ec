"""The docs site's pictures, drawn from the code and from real runs (nothing in them is typed in).

    python scripts/docs_figures.py architecture
        docs/assets/img/architecture.svg: the layers of docs/architecture.md with every part of the
        package in its layer, and the imports between layers as arrows (read from the source with
        the reader tests/test_layers.py uses)

    python scripts/docs_figures.py curves RUNS
        from a finished `magrpo-paper coordination ... --out RUNS` (its train/ and eval/ sweeps):
        docs/assets/img/curves/<method>.svg, one per trained row: the row's evaluation curve on each
        game (mean over seeds, the band one standard deviation), beside MAGRPO's and the untrained
        team's level; and docs/assets/img/benchmark/<game>.svg, every row of a game in one plot.

The command that made the checked-in pictures is written in the page that shows them.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "assets" / "img"


def _layers_reader():
    """tests/test_layers.py as a module: the one reader of imports and of the page's layer table."""
    spec = importlib.util.spec_from_file_location("test_layers", ROOT / "tests" / "test_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pyplot():
    from magrpo.table.render import pyplot

    plt = pyplot()
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "magrpo", "font.size": 9})
    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None, "Creator": None})
    _pyplot().close(fig)
    return path


# -- the architecture ------------------------------------------------------------------------------

def layer_edges(reader) -> tuple[list[tuple[str, list[str]]], Counter]:
    """The page's layers (label, sorted parts) top first, and how many module imports run from each
    layer to each other one (module-level and function-level alike)."""
    layers = [(label, sorted(parts)) for label, parts in reader.layers_from_docs(reader.ARCHITECTURE.read_text())]
    rank = {p: i for i, (_, parts) in enumerate(layers) for p in parts}
    counts: Counter = Counter()
    for module, deps in reader.graph().items():
        if reader.part(module) == "__init__":
            continue
        for dep in deps:
            a, b = rank[reader.part(module)], rank.get(reader.part(dep))
            if b is not None and a != b:
                counts[a, b] += 1
    return layers, counts


# The picture is shown about this wide on a page (pixels), and every label must read at this size there.
PAGE_WIDTH_PX, SMALLEST_LABEL_PX = 720, 11


def draw_architecture(out: Path) -> Path:
    """The layers as bands, each part of the package a box in its layer, the imports between layers
    as arrows on the right. Drawn 7.5 inches wide, so that a part's name is about 12 px on a page; a
    name that would run past its box (or a layer's name past its column) stops the drawing."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    plt = _pyplot()
    reader = _layers_reader()
    layers, counts = layer_edges(reader)
    per_row, box_w, box_h, gap = 4, 2.3, 0.42, 0.12
    heights = [math.ceil(len(parts) / per_row) * (box_h + gap) + gap for _, parts in layers]
    label_w, band_w, arrows_w = 1.8, per_row * (box_w + gap) + gap, 1.3
    total = sum(heights) + gap * (len(layers) - 1)
    width = label_w + band_w + arrows_w
    fig, ax = plt.subplots(figsize=(7.5, 7.5 * (total + 1.3) / width))
    ax.set_xlim(0, width)
    ax.set_ylim(-0.6, total + 0.7)
    ax.set_position((0, 0, 1, 1))
    ax.axis("off")
    ax.text(0, total + 0.45, "magrpo's layers, top first", fontsize=11, fontweight="bold", va="center")
    ax.text(0, total + 0.15, "a part imports only from its own layer and those below (tests/test_layers.py)",
            fontsize=9, va="center")
    tops, y, fitted = [], total, []
    colours = plt.colormaps["Pastel1"]
    for k, ((label, parts), h) in enumerate(zip(layers, heights)):
        bottom = y - h
        ax.add_patch(FancyBboxPatch((0, bottom), label_w + band_w, h, boxstyle="round,pad=0,rounding_size=0.08",
                                    facecolor=colours(k % 9), edgecolor="#888888", linewidth=0.6, alpha=0.55))
        column = ax.add_patch(FancyBboxPatch((0.08, bottom), label_w - 0.12, h, boxstyle="square,pad=0",
                                             facecolor="none", edgecolor="none"))
        name = ax.text(0.12, bottom + h / 2, label.replace(", ", ",\n").replace(" ", "\n"), fontsize=10,
                       fontweight="bold", va="center", linespacing=1.1)
        fitted.append((name, column))
        for j, p in enumerate(parts):
            row, col = divmod(j, per_row)
            x = label_w + gap + col * (box_w + gap)
            top = y - gap - row * (box_h + gap)
            package = (ROOT / "magrpo" / p).is_dir()
            box = ax.add_patch(FancyBboxPatch((x, top - box_h), box_w, box_h, boxstyle="round,pad=0,rounding_size=0.05",
                                              facecolor="#ffffff", edgecolor="#333333" if package else "#999999",
                                              linewidth=1.2 if package else 0.6))
            text = ax.text(x + box_w / 2, top - box_h / 2, p + ("/" if package else ".py"), fontsize=9,
                           ha="center", va="center", family="monospace", fontweight="bold" if package else "normal")
            fitted.append((text, box))
        tops.append((bottom, y))
        y = bottom - gap
    # the imports between layers, as arcs on the right: width by count, every one pointing down
    right = label_w + band_w
    biggest = max(counts.values(), default=1)
    for (a, b), n in sorted(counts.items(), key=lambda kv: (kv[0][1] - kv[0][0], kv[0])):
        ya, yb = sum(tops[a]) / 2, sum(tops[b]) / 2
        arrow = FancyArrowPatch((right, ya), (right, yb), connectionstyle=f"arc3,rad={-0.05 - 0.02 * (b - a)}",
                                arrowstyle="-|>", mutation_scale=8, linewidth=0.4 + 2.2 * n / biggest,
                                color="#1f4e79" if b > a else "#c00000", alpha=0.55)
        ax.add_patch(arrow)
    upward = sum(n for (a, b), n in counts.items() if b < a)
    ax.text(0, -0.35, f"arrows on the right: the imports between layers ({sum(counts.values())} in all, {upward} "
            f"upward), width by count", fontsize=9, color="#1f4e79", ha="left", va="center")
    fig.canvas.draw()
    for text, box in fitted:        # every name inside its box: none runs over a border or another box
        t, b = text.get_window_extent(), box.get_window_extent()
        if t.x0 < b.x0 or t.x1 > b.x1 or t.y0 < b.y0 or t.y1 > b.y1:
            raise ValueError(f"the label {text.get_text()!r} runs past its box: give it more room")
    return _save(fig, out)


# -- learning curves from a coordination table's runs -----------------------------------------------

def _rows(runs_dir: Path):
    """The coordination table's rendered rows per game, read the way `magrpo-table --layout paper`
    reads them."""
    from magrpo.table import paper
    from magrpo.table.runs import collect

    runs, _ = collect([runs_dir], None, include_unfinished=False)
    return paper.build(runs)


def _series(row, metric: str):
    from magrpo.table.stats import aggregate

    curves = [r.curves[metric] for r in row.runs if r.curves.get(metric)]
    return aggregate(curves) if curves else None


def draw_curves(runs_dir: Path, out: Path, metric: str = "eval/normalized_return") -> list[Path]:
    from magrpo.launch.paper_grid import TABLES
    from magrpo.table.render import line_style

    plt = _pyplot()
    tables = _rows(runs_dir)
    games = [t.task for t in tables]
    written = []
    methods = {row.label: row.name for t in tables for row in t.rows if not row.eval_only}
    for label, name in sorted(methods.items()):    # one picture per method: its curve on each game beside MAGRPO's
        fig, axes = plt.subplots(1, len(tables), figsize=(3.3 * len(tables), 2.6), sharey=True, squeeze=False)
        for ax, t in zip(axes[0], tables):
            _draw_game(ax, t, metric, only={name, "MAGRPO"}, line_style=line_style)
            ax.set_title(f"{t.task}", fontsize=9)
        axes[0][0].set_ylabel("normalized return (eval)")
        axes[0][0].legend(fontsize=7, loc="lower right")
        fig.suptitle(f"{name}: evaluation during training, mean ± std over seeds", fontsize=9, y=1.04)
        written.append(_save(fig, out / "curves" / f"{_slug(label)}.svg"))
    rows = set(TABLES["coordination"].rows)
    for t in tables:            # one picture per game: every row of the coordination table
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        _draw_game(ax, t, metric, only={r.name for r in t.rows if r.label in rows}, line_style=line_style, band=False)
        ax.set_title(f"{t.task}: every method, mean over seeds", fontsize=9)
        ax.set_ylabel("normalized return (eval)")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        written.append(_save(fig, out / "benchmark" / f"{t.task}.svg"))
    print(f"{len(written)} pictures from {sum(len(r.runs) for t in tables for r in t.rows)} runs "
          f"on {', '.join(games)}")
    return written


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")


def _draw_game(ax, table, metric: str, only, line_style, band: bool = True) -> None:
    """The rows named in `only` (None: all) of one game; with `band` (a method against MAGRPO) in
    two colours with their bands, else in the table's distinguishable styles."""
    key = metric.removeprefix("eval/")
    pair = band
    trained = [row for row in table.rows if not row.eval_only and (only is None or row.name in only)]
    for k, row in enumerate(trained):
        agg = _series(row, metric)
        if agg is None:
            continue
        steps, means, stds, _ = agg
        style = line_style(k, len(steps)) if not pair else {"color": "#999999" if row.name == "MAGRPO" and
                                                             len(only) > 1 else "#1f4e79"}
        (line,) = ax.plot(steps, means, linewidth=1.5, label=f"{row.name} (n={len(row.runs)})", **style)
        if band:
            ax.fill_between(steps, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                            color=line.get_color(), alpha=0.18, linewidth=0)
    for row in table.rows:
        cell = row.cells.get(key) if row.eval_only else None
        if cell is not None and cell.mean is not None:
            ax.axhline(cell.mean, color="#444444", linestyle="--", linewidth=1.0, label=f"{row.name}")
    ax.set_xlabel("update")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3, linewidth=0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    arch = sub.add_parser("architecture", help="the layers diagram")
    arch.add_argument("--out", type=Path, default=IMG / "architecture.svg")
    curves = sub.add_parser("curves", help="per-method and per-game learning curves from a coordination table")
    curves.add_argument("runs", type=Path, help="the --out directory of magrpo-paper coordination")
    curves.add_argument("--out", type=Path, default=IMG)
    args = p.parse_args(argv)
    if args.what == "architecture":
        print(draw_architecture(args.out))
    else:
        draw_curves(args.runs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
