"""The command-line entry points, one module per command (pyproject's [project.scripts]):

    magrpo-train        magrpo.cli.train        train (Hydra over conf/train.yaml)
    magrpo-eval         magrpo.cli.evaluate     evaluate a checkpoint, an exported team or the baselines
    magrpo-table        magrpo.cli.table        tables and curves from run directories (magrpo.table)
    magrpo-score        magrpo.cli.score        score a samples file (pass@k, ROUGE-L, ...)
    magrpo-paper        magrpo.cli.paper        one of the paper's tables: tuning, sweeps, render
    magrpo-dashboard    magrpo.cli.dashboard    a W&B workspace for a run group
    magrpo-export       magrpo.cli.export       a run's team as one shareable directory
    magrpo-crossplay    magrpo.cli.crossplay    agents paired across runs and teams
    magrpo-trust        magrpo.cli.trust        trust what a run or team records (magrpo.core.trust)
    magrpo-population   magrpo.cli.population   train a population of partners
    magrpo-check-task   magrpo.cli.check_task   does a task keep the Task contract

They sit on top of the package: nothing below imports them (tests/test_layers.py). Each is also
`python -m magrpo.cli.<module>`.
"""
