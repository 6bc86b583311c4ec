"""What both table layouts share when they write: cell text, escaping for markdown and LaTeX, the
notes under a table (what the ± is, the CodeBLEU floor, the runs left out), the curve figures'
frame, and writing the files into OUT."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from magrpo.table.runs import warn
from magrpo.table.stats import Cell
from magrpo.tasks.metrics import codebleu

STD_NOTE = ("mean ± sample standard deviation (n − 1 in the denominator) over seeds of each run's "
            "final evaluation; n = number of seeds, one seed shows ± n/a (one value has no spread); a cell marked "
            "(n=k) has the metric in only k of them")

TEX_NOTE = "Mean $\\pm$ sample std (n-1) over n seeds (n/a: one seed), final evaluation."

# Any reference works: the package's floor comes from its data-flow term, whatever the reference holds.
_CODEBLEU_REFERENCE = "def add_one(values):\n    out = [v + 1 for v in values]\n    return out\n"


CI_NOTE = ("mean ± the 95% confidence interval of the mean over seeds, t_{0.975, n−1} · s / √n (Student's t, "
           "s the sample standard deviation); n = number of seeds, one seed shows ± n/a (one value has no spread); "
           "a cell marked (n=k) has the metric in only k of them")

TEX_CI_NOTE = "Mean $\\pm$ 95\\% CI of the mean (Student's t) over n seeds (n/a: one seed), final evaluation."


def cell_text(cell: Cell, n: int, digits: int, pm: str = "±", missing: str = "–", interval: str = "std") -> str:
    """`mean ± spread`: the spread is the sample std (`interval="std"`) or the 95% CI's
    half-width (`"ci95"`); `± n/a` where it cannot be estimated (one seed: the notes say why)."""
    if cell.mean is None:
        return missing
    text = f"{cell.mean:.{digits}f}"
    spread = cell.ci95 if interval == "ci95" else cell.std
    if spread is not None:
        text += f" {pm} {spread:.{digits}f}"
    elif cell.na is not None:
        text += f" {pm} n/a"
    if cell.count < n:
        text += f" (n={cell.count})"
    return text


def md_escape(text: str) -> str:
    return text.replace("|", "\\|")


TEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


def tex_escape(text: str) -> str:
    return "".join(TEX_SPECIALS.get(ch, ch) for ch in text)


def tex_note_row(ncols: int, note: str) -> str:
    """The footnote row under a tabular: `note` is LaTeX already (escape plain text first)."""
    return f"\\multicolumn{{{ncols}}}{{l}}{{\\footnotesize {note}}} \\\\"


# -- the CodeBLEU floor ----------------------------------------------------------------------------


@functools.cache
def codebleu_floor() -> float | None:
    """CodeBLEU of empty code, as the `codebleu` package scores it (the tables keep its value for
    parity with the paper). The package replaces a data-flow match of 0 by 1, so code with no data
    flow in common with the reference, empty or unparsable code included, still gets that term's
    weight. None, with a warning, when the package cannot be loaded."""
    try:
        return float(codebleu([""], [_CODEBLEU_REFERENCE])["codebleu"])
    except Exception as e:   # a broken tree-sitter install must not cost the whole table
        warn(f"cannot compute the CodeBLEU floor with the codebleu package ({type(e).__name__}: {e})")
        return None


def codebleu_header(header: str) -> str:
    """A CodeBLEU column's header with the package's floor beside it."""
    floor = codebleu_floor()
    return header if floor is None else f"{header} (floor {floor:.3f})"


def codebleu_note(short: bool = False) -> str:
    """What a CodeBLEU cell is measured against. `short`: for the LaTeX footnote row, which sets
    the width of its tabular."""
    floor = codebleu_floor()
    value = "an unknown floor (the package could not be loaded)" if floor is None else f"{floor:.3f}"
    if short:
        return f"CodeBLEU: the codebleu package's score; empty code scores {value}."
    return ("CodeBLEU is the `codebleu` package's score, kept as it is for parity with the paper: the package "
            "counts a data-flow match of 0 as a full match, so empty or unparsable code already scores "
            f"{value} (the floor beside the column's name); read a cell against that floor, not against 0.")


# -- notes, figures, files -------------------------------------------------------------------------


def skipped_note(skipped: Sequence[tuple[Path, str]]) -> list[str]:
    """Markdown lines naming every run left out of the tables."""
    if not skipped:
        return []
    return ["", f"Not in the table ({len(skipped)} run(s)):", ""] + [f"- `{p}`: {why}" for p, why in skipped]


def _filename(text: str, limit: int = 120) -> str:
    """`text` as a file name: safe characters only, and short enough for any file system (a run's
    record names the text; a long one keeps its start and a hash of the whole)."""
    name = re.sub(r"[^A-Za-z0-9@.=+-]+", "_", text).strip("_")
    if len(name) <= limit:
        return name
    return f"{name[:limit - 17]}_{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:16]}"


MARKERS = "osD^vP*Xph<>"
LINESTYLES = ["-", "--", "-.", ":"]
LABEL_CHARS = 40


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files, no display): the one place the tables and
    magrpo-crossplay import it, when they draw (matplotlib is needed for plots only)."""
    import matplotlib  # noqa: PLC0415  optional: matplotlib loads only for a command that draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  optional: matplotlib loads only for a command that draws

    return plt


def line_style(k: int, points: int = 0) -> dict:
    """Matplotlib keywords that tell line k apart from every other of a figure: one of 20 colours
    (tab20), a marker cycling with another period (11) and a line style, so no two of the first
    220 lines share all three. `points`: the line's length, to place about 10 markers on it."""
    color = pyplot().colormaps["tab20"](k % 20)
    return {"color": color, "marker": MARKERS[k % len(MARKERS)], "linestyle": LINESTYLES[k // 20 % len(LINESTYLES)],
            "markersize": 4, "markevery": max(1, points // 10) if points else None}


def short_label(text: str, limit: int = LABEL_CHARS) -> str:
    """A legend label cut to `limit` characters (a long config diff ends in '…')."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def save_curve_plot(fig, ax, task: str, metric: str, ylabel: str, out: Path, legend_size: int = 8,
                    xlabel: str = "optimizer step", spread: str = "mean ± sample std over seeds",
                    title: str | None = None) -> Path:
    """Label, title and save one curves figure as OUT/<task>_<metric>.png; returns its path.
    `xlabel` other than optimizer steps (tokens, seconds) gets plain, non-integer ticks; `title`
    names what is plotted when the file name's `metric` does not read well."""
    plt = pyplot()
    ax.set_xlabel(xlabel)
    if xlabel == "optimizer step":
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.set_title(f"{task}: {title or metric}  ({spread})")
    ax.grid(alpha=0.3)
    # outside the axes, so no curve is hidden however many methods there are
    ax.legend(fontsize=legend_size, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    path = out / f"{_filename(task)}_{_filename(metric.replace('/', '_'))}.png"
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def save_and_report(out: Path, md: str, skipped: Sequence[tuple[Path, str]], write_csv_to: Callable[[Path], None],
                    tex: str, plot: Callable[[], list[Path]], counts: str) -> None:
    """Write table.md (with the runs left out listed under it), table.csv, table.tex and the
    curves into `out`, then print the markdown and `counts` (the command names the files once
    they are in place: magrpo.core.writes.publish)."""
    if skipped:
        md += "\n".join(skipped_note(skipped)) + "\n"
    (out / "table.md").write_text(md)
    write_csv_to(out / "table.csv")
    (out / "table.tex").write_text(tex)
    plot()
    print(md)
    print(counts)
