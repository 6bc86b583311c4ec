"""What the command-line entry points share, one concern a module:

  * magrpo.launch.command: the command line of a Hydra command (cli_main: a run's overrides taken
    up, plugins, Hydra's errors in our words) and of a plain argparse one (parse_plain_cli);
  * magrpo.launch.job: inside a job, how a failure is reported and what exit code it gets;
  * magrpo.launch.sweep: a multirun outlives its failed jobs and lists them at the end;
  * magrpo.launch.run_dirs: run directory names, one run per directory, the run's saved config;
  * magrpo.launch.groups, .override_errors: the config groups and options (--help) and our message
    for an override Hydra cannot apply.

Failures, by kind (docs/outputs.md, "When a run fails"):
  * a config error (a bad value, a missing path, an incompatible resume): one line on stderr
    naming the key, the value and what is allowed; exit code 2;
  * a setup error (a model, data set, device or sandbox that is not available here): one line
    on stderr naming it; exit code 1;
  * anything else (a crash while training): the traceback; exit code 1.
Each also leaves `summary.json` with `status: failed`, the phase and the reason in the run
directory. In a multirun (`-m`) a failed job does not stop the sweep: the failure is recorded
and reported, the other jobs run, and at the end `SweepReport` lists the failed jobs and the
command exits 1.

The names below are imported from here by the entry points and by conf/ (`magrpo.launch.SweepReport`,
`magrpo.launch.RunDirGuard`).
"""

from magrpo.config.schemas import CONF_DIR, conf_dir
from magrpo.launch.command import (
    HydraJob,
    cli_main,
    load_cli_plugins,
    parse_plain_cli,
    register_resolvers,
    run_hydra,
)
from magrpo.launch.groups import GROUPS_RESOLVER, INTERNAL_GROUPS, config_groups, group_options, help_groups
from magrpo.launch.job import (
    Interrupted,
    Terminated,
    interrupt_report,
    output_dir,
    quiet_progress_bars,
    report,
    run_job,
    stopped,
    term_as_interrupt,
)
from magrpo.launch.override_errors import explain_override_error
from magrpo.launch.run_dirs import (
    RUN_MARKERS,
    RUN_RECORDS,
    STAMP_RESOLVER,
    RunDirGuard,
    check_out_dir,
    check_run_dir,
    is_run_dir,
    keep_saved_config,
    resume_in_place,
    resumed_run,
    run_dir_around,
    run_dir_follows_output_dir,
    stamp,
)
from magrpo.launch.sweep import SweepReport, failed_jobs, job_dirs

__all__ = [
    "CONF_DIR", "GROUPS_RESOLVER", "INTERNAL_GROUPS", "RUN_MARKERS", "RUN_RECORDS", "STAMP_RESOLVER", "HydraJob",
    "Interrupted", "RunDirGuard", "SweepReport", "Terminated", "check_out_dir", "check_run_dir", "cli_main",
    "conf_dir", "config_groups", "explain_override_error", "failed_jobs", "group_options", "help_groups",
    "interrupt_report", "is_run_dir", "job_dirs", "keep_saved_config", "load_cli_plugins", "output_dir",
    "parse_plain_cli", "quiet_progress_bars", "register_resolvers", "report", "resume_in_place", "resumed_run", "run_dir_around",
    "run_dir_follows_output_dir", "run_hydra", "run_job", "stamp", "stopped", "term_as_interrupt",
]
