"""``--in-process-stacks all``: a startup hook that arms the in-process stack dump in every
Python process of the trainer, not only those that import ``hangwatch.trainer``.

The supervisor writes one folder per run, ``<run dir>/startup-hook/``, holding a single
``sitecustomize.py``, and puts that folder first on the trainer's ``PYTHONPATH``. Python
imports ``sitecustomize`` at start-up from the first folder of ``sys.path`` that has one;
ours arms the dump (``contract.stackdump.arm``) and then runs the ``sitecustomize`` it
shadows (a distribution's or the user's), so that one still runs. Why not the others:
a ``.pth`` file works only inside a site-packages folder (one would have to write into
the trainer's environment), and ``usercustomize`` is not imported inside a virtual
environment (user site-packages are off there), which is where most trainers run.

It changes exactly this in the trainer's environment: ``PYTHONPATH`` gains the hook
folder in front, and ``HANGWATCH_IN_PROCESS_STACKS=all`` is set. A Python run with
``-E``/``-I`` (which ignore ``PYTHONPATH``), or without hangwatch installed in its
environment, is not covered; nothing else changes for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from hangwatch.contract import atomic

FOLDER = "startup-hook"

#: The hook. Quiet whatever happens: a start-up hook that raised would stop every Python
#: program of the trainer, shells' helpers included.
HOOK_SOURCE = '''"""hangwatch's start-up hook (hangwatch run --in-process-stacks all): arms the in-process stack
dump of this Python process, then runs the sitecustomize this file shadows."""


def _hangwatch_arm():
    try:
        from hangwatch.contract import stackdump
    except Exception:  # this interpreter has no hangwatch: nothing to arm
        return
    stackdump.arm()


def _hangwatch_next_sitecustomize():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _hangwatch_arm()
except Exception:
    pass
_hangwatch_next_sitecustomize()
'''


def write_hook(run_dir: Path) -> Path:
    """The hook folder of ``run_dir`` with its ``sitecustomize.py`` (rewritten each time: the
    current hangwatch's). Returns the folder to put on ``PYTHONPATH``."""
    folder = run_dir / FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic.write_file(folder / "sitecustomize.py", HOOK_SOURCE.encode("utf-8"))
    return folder


def with_hook(environ: Mapping[str, str], folder: Path) -> str:
    """``PYTHONPATH`` with the hook folder first (what was there kept after it)."""
    current = environ.get("PYTHONPATH", "")
    return str(folder) + (os.pathsep + current if current else "")
