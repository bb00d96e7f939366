"""hangwatch's exit codes: the one definition (the CLI's --help lists them from here).

``EXIT_CODES`` are ``hangwatch run``'s; ``REPRODUCE_EXIT_CODES`` are ``hangwatch reproduce``'s.

After SIGINT/SIGTERM to the supervisor the exit status is the trainer's own,
shell style, and is not listed here.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERNAL = 70
EXIT_BUDGET = 71
EXIT_NO_PROGRESS = 72
EXIT_CRASH_STOP = 73
EXIT_UNKILLABLE = 74
EXIT_COHORT = 75
EXIT_CHECKPOINTS = 76

EXIT_CODES = {
    EXIT_OK: "the trainer finished (exit 0)",
    EXIT_USAGE: "bad command line, configuration or input",
    EXIT_INTERNAL: "hangwatch itself failed (see hangwatch.log)",
    EXIT_BUDGET: "gave up: restart budget exhausted (--max-restarts or --max-restarts-per-hour)",
    EXIT_NO_PROGRESS: "gave up: several restarts in a row made no checkpoint progress",
    EXIT_CRASH_STOP: "the trainer crashed and --on-crash stop was set",
    EXIT_UNKILLABLE: "processes of the tree survived SIGKILL; not restarting into a GPU they may hold",
    EXIT_COHORT: "multi-node: a node's supervisor or the cohort store was lost, or nodes could not agree",
    EXIT_CHECKPOINTS: "the checkpoint directory could not be listed; not relaunching from scratch over it",
}

# ``hangwatch reproduce``: its own three outcomes (a bad command line is EXIT_USAGE, as everywhere).
EXIT_NOT_REPRODUCED = 0
EXIT_REPRODUCED = 80
EXIT_CANNOT_REPRODUCE = 81

REPRODUCE_EXIT_CODES = {
    EXIT_NOT_REPRODUCED: "did not reproduce: every run completed",
    EXIT_REPRODUCED: "reproduced: at least one run wedged (no engine step within --step-timeout)",
    EXIT_CANNOT_REPRODUCE: "could not run: no batch in the bundle, the model missing, or the engine failed to start",
    EXIT_USAGE: "bad command line (an unknown --policy, --times below 1, ...)",
}
