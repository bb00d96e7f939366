"""Progress beacons: the trainer's side (``beat``) and the supervisor's side (``read_heartbeat``).

The trainer reports progress by rewriting one small JSON file, the path in
``HANGWATCH_HEARTBEAT``. The client is dependency-free (standard library only)
so it can be imported from any training script, any process of the tree, and
costs a few microseconds plus one rename per call.

Invariants:
* A reader never sees a half-written beat: each beat is written to a private
  temporary file in the same directory and renamed over the old one.
* Progress is any change of ``(pid, seq)``: ``seq`` counts beats within one
  process, so two processes beating into the same file both count.
* Without ``HANGWATCH_HEARTBEAT`` in the environment, ``beat`` does nothing: a
  trainer instrumented for hangwatch still runs without it.
* Each process also writes its own file beside the shared one,
  ``heartbeat-<pid>.json`` (``rank_beacon_file``): the shared file holds the newest
  beat of any process (status, phases), the per-process files let the supervisor
  judge every rank on its own (one stuck rank is seen while another beats). A beat
  carries the process's rank where ``RANK``/``LOCAL_RANK`` say it, and ``final``
  when the process says it is done (it is never judged after that).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from hangwatch.contract.capped import read_capped
from hangwatch.contract.env import HEARTBEAT as HEARTBEAT_ENV

_counter = itertools.count(1)
_lock = threading.Lock()
_context: dict[str, Any] = {}


def set_context(info: Mapping[str, Any]) -> None:
    """Info every later beat of this process carries (a beat's own keys win), replacing what
    was set before. For a library inside the trainer (the generator): the supervisor reads only
    the latest beat at each tick, so state told in one beat is missed when the trainer's own
    next beat (a checkpoint's, a callback's) replaces it first."""
    global _context
    _context = dict(info)


def _env_rank() -> int | None:
    """This process's rank as the launcher says it (``RANK``, else ``LOCAL_RANK``), or None."""
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and len(value) < 10:
            return int(value)
    return None


def _write_atomic(target: str, record: Mapping[str, Any]) -> bool:
    """``record`` as JSON into ``target``, through a private temporary file and a rename."""
    tmp = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        # 0600 whatever the trainer's umask, never through a symlink: it sits in the private run dir.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, default=str)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True


def beat(step: int | None = None, phase: str | None = None, *, path: str | None = None, final: bool = False,
         **info: Any) -> bool:
    """Report progress. ``phase`` names what the trainer is doing now (``train``,
    ``generate``, ``checkpoint``, ...); the supervisor may give a phase its own,
    longer timeout. Extra keyword arguments are recorded as ``info`` (small,
    JSON-serialisable values; the supervisor journals them when they change).

    ``final=True`` says this process is done (its last beat): the supervisor stops
    judging its progress, so a rank that finishes early is no hang.

    Returns whether a beat was written. Never raises for an I/O problem: a
    full disk must not crash training, it only stops the beacons.
    """
    target = path or os.environ.get(HEARTBEAT_ENV)
    if not target:
        return False
    with _lock:
        seq = next(_counter)
    record: dict[str, Any] = {
        "pid": os.getpid(),
        "seq": seq,
        "ts": time.time(),
        "step": step,
        "phase": phase,
        "info": {**_context, **info} if _context else info,
    }
    rank = _env_rank()
    if rank is not None:
        record["rank"] = rank
    if final:
        record["final"] = True
    # The process's own file first: a reader of the shared file never sees a beat its own
    # file does not have yet.
    _write_atomic(rank_beacon_file(target, os.getpid()), record)
    return _write_atomic(target, record)


@dataclass(frozen=True)
class Heartbeat:
    """The last beat the supervisor read."""

    pid: int
    seq: int
    ts: float
    step: int | None
    phase: str | None
    info: Mapping[str, Any] = field(default_factory=dict)
    # The process's rank (``RANK``/``LOCAL_RANK``), None where the launcher set none.
    rank: int | None = None
    # The process said it is done (its last beat): never judged after it.
    final: bool = False

    @property
    def who(self) -> str:
        """How a verdict names the process: its rank where known, and its pid."""
        return f"rank {self.rank} (pid {self.pid})" if self.rank is not None else f"pid {self.pid}"

    @property
    def token(self) -> tuple[int, int]:
        """Identity of this beat; a new token means progress."""
        return (self.pid, self.seq)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "seq": self.seq,
            "ts": self.ts,
            "step": self.step,
            "phase": self.phase,
            "info": dict(self.info),
            # Only when set: beats of processes without a rank read as before.
            **({"rank": self.rank} if self.rank is not None else {}),
            **({"final": True} if self.final else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Heartbeat":
        """Raises ValueError/TypeError when ``data`` is not a beat. The trainer writes the file:
        a time that is NaN or infinite is no beat, and a phase that is not a string (a list,
        an object) is kept as its JSON text. As it was, a phase list reached the detector's
        phase-timeout lookup and the supervisor's tick died on it (``unhashable type``,
        exit 70: the run was left unwatched)."""
        step = data.get("step")
        phase = data.get("phase")
        if phase is not None and not isinstance(phase, str):
            phase = json.dumps(phase, sort_keys=True, default=str)
        if phase is not None:
            phase = encodable(phase)
        ts = float(data.get("ts", 0.0))
        if not math.isfinite(ts):
            raise ValueError(f"heartbeat ts is not a finite number: {ts!r}")
        info = data.get("info") or {}
        pid, seq = _int64(data["pid"], "pid"), _int64(data["seq"], "seq")
        rank = data.get("rank")
        return cls(
            rank=_int64(rank, "rank") if rank is not None and not isinstance(rank, bool) else None,
            final=data.get("final") is True,
            pid=pid,
            seq=seq,
            ts=ts,
            step=_int64(step, "step") if step is not None else None,
            phase=phase,
            info=_encodable_tree(dict(info)) if isinstance(info, Mapping) else {},
        )


def encodable(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate shown as ``\\udcXX``.

    The trainer writes the beat, and JSON lets it name a lone surrogate (``"\\udcff"``), which no
    UTF-8 writer accepts: a phase of one made the metrics exporter fail at every tick and, at the
    run's end, the supervisor exit 70 instead of its outcome's code, and the incident alert fail
    on every target that encodes its text (apprise's form://, xml://). Cleaned here, once, for
    every reader of the beat."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _encodable_tree(value: Any) -> Any:
    """A copy of ``value`` (parsed JSON: dicts, lists, strings, numbers) with every string, keys
    too, ``encodable``. Built with a stack, not recursion: the beat's nesting is the trainer's."""
    stack: list[tuple[Any, Any]] = []

    def copy(item: Any) -> Any:
        if isinstance(item, str):
            return encodable(item)
        if isinstance(item, (list, dict)):
            new: Any = [] if isinstance(item, list) else {}
            stack.append((item, new))
            return new
        return item

    top = copy(value)
    while stack:
        src, dst = stack.pop()
        if isinstance(src, list):
            dst.extend(copy(item) for item in src)
        else:
            for key, item in src.items():
                dst[encodable(key) if isinstance(key, str) else key] = copy(item)
    return top


def _int64(value: Any, name: str) -> int:
    """A counter as the supervisor keeps it: one past 64 bits is no beat's (a step of 400
    digits stopped the metrics at every tick: no float holds it)."""
    number = int(value)
    if not -(1 << 63) <= number < (1 << 63):
        raise ValueError(f"heartbeat {name} out of range")
    return number


# A beat is a few hundred bytes; anything past this is not one of ours.
MAX_BEAT_BYTES = 64 * 1024

ENGINE_HEARTBEAT_NAME = "engine-heartbeat.json"
#: The phases the trainer's generator beats through one rollout call, in order
#: (``ColocatedGenerator.generate``): a beat outside them is the trainer's own work again.
GENERATOR_PHASES = ("offload", "stage", "start", "standby", "load", "generate", "sleep", "restore")
# Engine processes a tick reads at most (the newest): one per rank's engine, plus the dead ones.
MAX_ENGINE_BEACONS = 64
_MAX_SCAN = 4096  # directory entries looked at per read


def engine_heartbeat_path(heartbeat: str | os.PathLike[str]) -> str:
    """The base name the rollout engines beat under (``HANGWATCH_ENGINE_HEARTBEAT``): beside
    the trainer's heartbeat. Each engine process writes its own file
    (``engine_beacon_file``), because engines are judged one by one.

    Separate from the trainer's heartbeat, because the two mean different things: the
    trainer's beats are optimizer progress, an engine's are engine steps while a request
    is in flight (``phase="generate"``, ``step`` = engine steps so far). Sharing one file
    would let a healthy engine's beats hide a hung trainer; sharing one file between the
    engines of several ranks would let one rank's idle engine hide another's stuck one.
    """
    return os.path.join(os.path.dirname(os.fspath(heartbeat)), ENGINE_HEARTBEAT_NAME)


def engine_beacon_file(base: str | os.PathLike[str], pid: int) -> str:
    """The file engine process ``pid`` beats into: ``engine-heartbeat-<pid>.json``."""
    root, ext = os.path.splitext(os.fspath(base))
    return f"{root}-{pid}{ext}"


def rank_beacon_file(heartbeat: str | os.PathLike[str], pid: int) -> str:
    """The file trainer process ``pid`` beats into beside the shared one: ``heartbeat-<pid>.json``."""
    return engine_beacon_file(heartbeat, pid)


# Trainer processes a tick reads at most (the newest): ranks of a node, their side processes.
MAX_RANK_BEACONS = 256


def read_rank_beacons(heartbeat: str | os.PathLike[str]) -> tuple[Heartbeat, ...]:
    """Every trainer process's last beat (``heartbeat-<pid>.json``, the newest ``MAX_RANK_BEACONS``)."""
    return _read_beacons(heartbeat, MAX_RANK_BEACONS)


def read_engine_beacons(base: str | os.PathLike[str]) -> tuple[Heartbeat, ...]:
    """Every engine process's last beat (the newest ``MAX_ENGINE_BEACONS`` files), in no order."""
    return _read_beacons(base, MAX_ENGINE_BEACONS)


def _read_beacons(base: str | os.PathLike[str], limit: int) -> tuple[Heartbeat, ...]:
    """The last beats in ``<root>-<pid><ext>`` files beside ``base``: the newest ``limit``."""
    directory, name = os.path.split(os.fspath(base))
    root, ext = os.path.splitext(name)
    prefix = root + "-"
    found: list[tuple[float, str]] = []
    try:
        with os.scandir(directory or ".") as entries:
            for i, entry in enumerate(entries):
                if i >= _MAX_SCAN:
                    break
                middle = entry.name[len(prefix):len(entry.name) - len(ext)]
                if entry.name.startswith(prefix) and entry.name.endswith(ext) and middle.isdigit():
                    try:
                        found.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
                    except OSError:
                        continue  # gone since the scan
    except OSError:
        return ()
    found.sort(reverse=True)
    beats = (read_heartbeat(path) for _, path in found[:limit])
    return tuple(b for b in beats if b is not None)


def read_heartbeat(path: str | os.PathLike[str]) -> Heartbeat | None:
    """The current beat, or None when there is none yet or it is unreadable (or oversized)."""
    # The trainer writes this file: whatever it holds must not stop the supervisor's tick.
    # Never blocks (a FIFO), never follows a link, never reads past the cap; nesting too deep
    # and numbers too large for an int (1e400) are no beat either.
    try:
        return Heartbeat.from_json(json.loads(read_capped(path, MAX_BEAT_BYTES, follow_symlinks=False)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
        return None
