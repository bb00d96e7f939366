"""Recognising a launcher that joins the job's rendezvous (torchrun, accelerate, deepspeed).

From a node's command line (``runs_launcher``: told to the others at join) and from a
worker's environment (``rendezvous_nodes``: the node count of the rendezvous it joined,
which ``link.CohortLink`` compares with the cohort's).
"""

from __future__ import annotations

import os
from typing import Sequence

from hangwatch.contract.procid import initial_environ


_PROGRAMS = frozenset({"torchrun", "deepspeed", "accelerate", "accelerate-launch", "env", "uv"})


def runs_launcher(command: Sequence[str]) -> bool:
    """Whether ``command`` starts a launcher that joins the job's rendezvous (torchrun,
    ``python -m torch.distributed.run``/``launch``, ``accelerate launch``, ``deepspeed``), not
    standalone: the program after any ``env``/``VAR=value``, ``uv run`` and ``srun [options]``
    prefix, never a word among its arguments.

    Not every node of a cohort trains: one may serve rollouts (``trl vllm-serve``) or a reward
    model. Only the launchers' nodes make up the rendezvous (``CohortLink._launcher_apart``).
    A launcher behind a wrapper (a shell script) is not recognised; the check allows for that.
    """
    argv = [str(a) for a in command]
    i = 0
    while i < len(argv):  # the prefixes that run another program
        word, name = os.path.basename(argv[i]), argv[i].partition("=")[0]
        if word == "env" or ("=" in argv[i] and name.isidentifier()):
            i += 1
        elif word == "uv" and argv[i + 1:i + 2] == ["run"]:
            i += 2
        elif word == "srun":  # its options may take values ("-N 2"): on to the first known program
            i = next((k for k in range(i + 1, len(argv)) if os.path.basename(argv[k]) in _PROGRAMS
                      or os.path.basename(argv[k]).startswith("python")), len(argv))
        else:
            break
    if i >= len(argv):
        return False
    word, rest = os.path.basename(argv[i]), argv[i + 1:]
    if word.startswith("python"):
        while rest and rest[0].startswith("-") and not rest[0].startswith("-m"):
            rest = rest[1:]  # the interpreter's own flags (-u, -X dev, ... taken one word each)
        if not rest:
            return False
        module, rest = (rest[0][2:], rest[1:]) if rest[0] != "-m" else ((rest[1:2] or [""])[0], rest[2:])
        launcher = module in ("torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch")
    else:
        launcher = word in ("torchrun", "deepspeed", "accelerate-launch") or (word == "accelerate" and rest[:1] == ["launch"])
    # --standalone is the launcher's own option (a rendezvous of its own) only before its script.
    own = rest[:next((k for k, a in enumerate(rest) if a.endswith(".py")), len(rest))]
    return launcher and "--standalone" not in own


def rendezvous_nodes(pid: int) -> int | None:
    """The node count of the rendezvous a launcher's worker joined (its ``GROUP_WORLD_SIZE``), or None:
    not a torchrun-style worker, gone, or not readable."""
    try:
        environ = initial_environ(pid)
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"GROUP_WORLD_SIZE="):
            value = entry.partition(b"=")[2]
            return int(value) if value.isdigit() and len(value) < 10 else None
    return None


_PORT_OPTIONS = ("--rdzv-endpoint", "--rdzv_endpoint", "--master-port", "--master_port", "--main_process_port",
                 "--main-process-port")


def rendezvous_port(command: Sequence[str]) -> int | None:
    """The port the launcher in ``command`` hosts or joins its rendezvous on, when an option names it
    (``--rdzv-endpoint HOST:PORT``, ``--master-port PORT``...), else None."""
    argv = [str(a) for a in command]
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name not in _PORT_OPTIONS:
            continue
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        port = value.rpartition(":")[2] if "endpoint" in name else value
        if port.isdigit() and len(port) <= 5:
            return int(port)
    return None
