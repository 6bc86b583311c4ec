"""`magrpo-dashboard --project P --group G`: a W&B workspace that compares the runs of one sweep.

    magrpo-dashboard --project magrpo --group paper-writing-paper-2026-01-01_12-00-00
    magrpo-dashboard --project magrpo --group G --out dashboard.json     # offline: write the spec

The workspace (built with the `wandb-workspaces` library, extra `dashboard`) shows the runs of
W&B group G -- every job of a sweep joins one group, see magrpo.core.tracking -- grouped by their
`algo` config key (a prompting baseline's `algo` is its method), so each line is the mean over
seeds with the spread shaded. Sections: the reward and normalized return, the reward's
components, per-turn rewards, pass@k, ROUGE-L and CodeBLEU, per-level accuracies, collaboration
(the diagnostics of `eval.diagnostics=true`, and each policy's gradient norm, KL and entropy),
cost, and the table of sample completions.

Online (a W&B login and no --out) it saves the workspace and prints its URL. Offline, or with
--out, it writes the workspace spec (the JSON the W&B server stores for a saved view) to a file
and lists its panels; run the command again where W&B is reachable to save it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

PROG = "magrpo-dashboard"

# (section, [(panel title, metrics or a regex, kind)]): kind "lines" = those metrics; "regex" = a
# metric_regex panel (components differ by task: one panel shows whichever the runs logged).
SECTIONS: list[tuple[str, list[tuple[str, Any, str]]]] = [
    ("Reward", [("normalized return (eval)", ["eval/normalized_return"], "lines"),
                ("reward (eval)", ["eval/reward_mean"], "lines"),
                ("reward (train)", ["train/reward_mean"], "lines")]),
    ("Reward components", [("components (eval)", r"eval/reward/.*", "regex"),
                           ("components (train)", r"train/reward/.*", "regex")]),
    ("Per-turn rewards", [("reward per turn (eval)", r"eval/turn_\d+/reward_mean", "regex"),
                          ("reward per turn (train)", r"train/turn_\d+/reward_mean", "regex")]),
    ("pass@k", [(f"pass@{k}", [f"eval/pass@{k}"], "lines") for k in (1, 3, 5, 10)]),
    ("Text and code similarity", [("ROUGE-L", ["eval/rouge_l"], "lines"), ("CodeBLEU", ["eval/codebleu"], "lines")]),
    ("Per-level accuracy", [("fraction of samples reaching each level", r"eval/acc/level_.*", "regex")]),
    # eval.diagnostics=true (magrpo.evaluation.collaboration): did the agents cooperate, or did one do the work?
    ("Collaboration", [("contribution per agent (eval)", r"eval/agent_\d+/contribution$", "regex"),
                       ("lazy-agent rate (eval)", ["eval/lazy_agent_rate"], "lines"),
                       ("answer similarity, ROUGE-L (eval)", ["eval/answer_similarity"], "lines"),
                       ("influence per agent (eval)", r"eval/agent_\d+/influence$", "regex"),
                       ("grad norm per policy and critic (train)", r"train/[^/]+/grad_norm$", "regex"),
                       ("KL to the reference per policy (train)", r"train/[^/]+/kl$", "regex"),
                       ("entropy per policy (train)", r"train/[^/]+/entropy$", "regex")]),
    ("Cost", [("response time (s per item)", ["eval/response_time_s"], "lines"),
              ("step time (s)", ["time/step_s"], "lines")]),
]
SAMPLES_TABLE = "eval/samples"
GROUP_KEY = "algo"


def build_workspace(entity: str, project: str, group: str, name: str | None = None):
    """The workspace object: runs of W&B group `group`, grouped by the `algo` config key."""
    import wandb_workspaces.reports.v2 as wr  # noqa: PLC0415  optional: the dashboard extra
    import wandb_workspaces.workspaces as ws  # noqa: PLC0415  optional: the dashboard extra
    from wandb_workspaces import expr  # noqa: PLC0415  optional: the dashboard extra

    sections = []
    for title, panels in SECTIONS:
        built: list[wr.interface.PanelTypes] = []
        for panel_title, metrics, kind in panels:
            if kind == "regex":
                built.append(wr.LinePlot(title=panel_title, x="step", metric_regex=metrics,
                                         groupby_aggfunc="mean", groupby_rangefunc="stddev"))
            else:
                built.append(wr.LinePlot(title=panel_title, x="step", y=list(metrics),
                                         groupby_aggfunc="mean", groupby_rangefunc="stddev"))
        sections.append(ws.Section(name=title, panels=built, is_open=True))
    sections.append(ws.Section(name="Samples", panels=[wr.WeavePanelSummaryTable(table_name=SAMPLES_TABLE)],
                               is_open=True))
    return ws.Workspace(
        entity=entity, project=project, name=name or f"magrpo {group}", sections=sections,
        settings=ws.WorkspaceSettings(x_axis="step"),
        runset_settings=ws.RunsetSettings(filters=[expr.Metric("Group") == group],
                                          groupby=[ws.Config(GROUP_KEY)]))


def workspace_spec(workspace) -> dict:
    """The view the W&B server stores, as plain JSON (built without any network call)."""
    return json.loads(workspace._to_model().model_dump_json())


def panels_of(spec: dict) -> list[dict]:
    """(section, title, metrics, regex, view type) of every panel of a spec: what tests and users check."""
    out = []
    for section in spec["spec"]["section"]["panel_bank_config"]["sections"]:
        for panel in section["panels"]:
            cfg = panel.get("config") or {}
            out.append({"section": section["name"], "type": panel.get("view_type"), "title": cfg.get("chart_title"),
                        "metrics": cfg.get("metrics") or [], "regex": cfg.get("metric_regex") if
                        cfg.get("use_metric_regex") else None})
    return out


def _online() -> bool:
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return False
    try:
        import wandb  # noqa: PLC0415  optional: W&B logging (logger=wandb) only

        return bool(wandb.api.api_key)
    except Exception:
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Build a W&B workspace comparing the runs of one "
                                "sweep (W&B group), grouped by algorithm.")
    p.add_argument("--project", required=True, help="W&B project (logger.project)")
    p.add_argument("--group", required=True, help="W&B group: the sweep's name (logger.group)")
    p.add_argument("--entity", default=None, help="W&B entity (default: $WANDB_ENTITY or your default entity)")
    p.add_argument("--name", default=None, help="workspace name (default: 'magrpo <group>')")
    p.add_argument("--out", type=Path, default=None,
                   help="write the workspace spec (JSON) to this file instead of saving it (folders are created)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        workspace = build_workspace(args.entity or os.environ.get("WANDB_ENTITY") or "", args.project,
                                    args.group, args.name)
    except ImportError as e:
        print(f"{PROG}: error: {e}; install the extra: pip install -e '.[dashboard]'", file=sys.stderr)
        return 2
    out = args.out
    if out is None and not _online():
        out = Path(f"dashboard_{args.group}.json")
        print(f"{PROG}: no W&B login (or WANDB_MODE=offline): writing the spec instead of saving it")
    if out is not None:
        spec = workspace_spec(workspace)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(spec, indent=1) + "\n")
        except OSError as e:
            print(f"{PROG}: error: cannot write the spec to {out}: {e}", file=sys.stderr)
            return 2
        for p in panels_of(spec):
            shown = p["regex"] or ", ".join(p["metrics"]) or SAMPLES_TABLE
            print(f"  [{p['section']}] {p['title'] or p['type']}: {shown}")
        print(f"wrote {out} (runs of group {args.group!r}, grouped by config.{GROUP_KEY})")
        return 0
    if not workspace.entity:
        import wandb  # noqa: PLC0415  optional: W&B logging (logger=wandb) only

        workspace.entity = wandb.Api().default_entity
    workspace.save()
    print(workspace.url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
