"""The ``HANGWATCH_*`` environment: the names the supervisor and the trainer agree on.

The supervisor sets these for every attempt (``ATTEMPT_VARS``); the trainer
side (heartbeat client, rollout policy, generator) reads them. Anything else
starting with ``HANGWATCH_`` in the supervisor's own environment is dropped
before launch, so a stale value from an outer run cannot leak into an attempt;
``PASS_THROUGH`` names the few that are the user's to set.
"""

from __future__ import annotations

PREFIX = "HANGWATCH_"

RUN_DIR = "HANGWATCH_RUN_DIR"            #: the run directory
ATTEMPT = "HANGWATCH_ATTEMPT"            #: attempt number, 1-based
ATTEMPT_DIR = "HANGWATCH_ATTEMPT_DIR"    #: this attempt's directory
HEARTBEAT = "HANGWATCH_HEARTBEAT"        #: the file the trainer beats into
ENGINE_HEARTBEAT = "HANGWATCH_ENGINE_HEARTBEAT"  #: the file the rollout engine's worker beats into, per engine step
RESUME_FROM = "HANGWATCH_RESUME_FROM"    #: on a resume: the checkpoint chosen
CUDAGRAPHS = "HANGWATCH_CUDAGRAPHS"      #: "1" engine defaults, "0" graphs off
ENFORCE_EAGER = "HANGWATCH_ENFORCE_EAGER"  #: "1" after a second stall with graphs off
SIM_GPU = "HANGWATCH_SIM_GPU"            #: with --gpu-probe file:PATH, the simulated GPU
CONTROL = "HANGWATCH_CONTROL"            #: the supervisor's instructions to the trainer (contract.control)
#: seconds within which the supervisor catches a wedged rollout engine and has captured its
#: evidence; the generator's own generate timeout is never shorter (it is only the backstop)
DETECT_WITHIN = "HANGWATCH_DETECT_WITHIN"
#: "engine": the trainer's generator may restart its engine alone; "job": it may not (``--recovery
#: job``, or a multi-node cohort, where one node's engine restart would desynchronise the ranks)
ENGINE_RECOVERY = "HANGWATCH_ENGINE_RECOVERY"
#: the supervisor's pid: a trainer process declares it its ptracer (Yama's PR_SET_PTRACER), so
#: the supervisor's py-spy may attach under ``kernel.yama.ptrace_scope=1`` (``contract.ptracer``)
SUPERVISOR_PID = "HANGWATCH_SUPERVISOR_PID"
#: the signal on which a trainer process dumps its own stacks (``contract.stackdump``), e.g. "SIGRTMIN+7"
STACKS_SIGNAL = "HANGWATCH_STACKS_SIGNAL"
#: which processes register that dump: "hangwatch" (those importing hangwatch.trainer, and the
#: engine worker), "all" (every Python process, through the startup hook), "off"
IN_PROCESS_STACKS = "HANGWATCH_IN_PROCESS_STACKS"

#: set in the supervisor's own environment while its guardian is armed (a random token): every
#: helper it starts carries it, and the guardian kills what does when the supervisor dies.
#: Never passed to the trainer (not an attempt variable), whose processes carry ATTEMPT_DIR.
SUPERVISOR = "HANGWATCH_SUPERVISOR"
#: in a warm launcher's initial environment (``--prewarm-launcher``; a random token): it gets the
#: attempt's variables only when it is taken, after its environment was fixed, so the guardian
#: knows the warm root and all it forks by this mark instead of ATTEMPT_DIR.
WARM = "HANGWATCH_WARM"
#: a multi-node job's cohort secret, the same on every node (the scheduler passes it; docs/multinode.md):
#: the supervisor's own, dropped from the trainer's environment like every name not in PASS_THROUGH
COHORT_SECRET = "HANGWATCH_COHORT_SECRET"
CONFIG = "HANGWATCH_CONFIG"              #: the user's settings file (read by the CLI)
PYSPY = "HANGWATCH_PYSPY"                #: the py-spy binary to use instead of PATH's

ATTEMPT_VARS = (RUN_DIR, ATTEMPT, ATTEMPT_DIR, HEARTBEAT, ENGINE_HEARTBEAT, RESUME_FROM, CUDAGRAPHS, ENFORCE_EAGER, SIM_GPU, CONTROL,
                DETECT_WITHIN, ENGINE_RECOVERY, SUPERVISOR_PID, STACKS_SIGNAL, IN_PROCESS_STACKS)
PASS_THROUGH = frozenset({CONFIG, PYSPY})


def without_ours(environ: dict[str, str] | object) -> dict[str, str]:
    """``environ`` minus every ``HANGWATCH_*`` name that is not the user's to set."""
    return {k: v for k, v in dict(environ).items() if not k.startswith(PREFIX) or k in PASS_THROUGH}  # type: ignore[call-overload]
