"""Killing the whole tree: SIGTERM, a grace period, SIGKILL, reap, confirm.

Safety: a process is signalled only while it is provably ours, i.e. the pid
still has the create time we recorded when we found it in the tree (psutil's
``send_signal`` re-checks it). A whole process group is signalled with
``killpg`` only when every process in it is such a member, so a group that an
unrelated process joined is signalled member by member instead.

Processes forked while we wait are picked up by rescanning the tree on every
poll. Zombies count as dead (they hold no memory, no GPU), and we reap the
ones that are our children. A process in uninterruptible sleep (state D) can
survive SIGKILL for as long as its I/O hangs: after ``kill_timeout`` we stop
waiting and report it as a survivor, so the supervisor's wait stays bounded.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil
import structlog

from hangwatch.contract.procid import ProcKey, is_running, same_process
from hangwatch.supervisor.proctree import ProcessTree

log = structlog.get_logger("hangwatch.kill")


@dataclass(frozen=True)
class KillReport:
    targets: tuple[dict[str, Any], ...]
    signals: tuple[dict[str, Any], ...]
    escalated: tuple[int, ...]
    survivors: tuple[dict[str, Any], ...]
    duration_s: float

    @property
    def confirmed(self) -> bool:
        return not self.survivors

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(t["pid"] for t in self.targets)

    def to_json(self) -> dict[str, Any]:
        return {
            "pids": list(self.pids),
            "targets": list(self.targets),
            "signals": list(self.signals),
            "escalated": list(self.escalated),
            "survivors": list(self.survivors),
            "confirmed": self.confirmed,
            "duration_s": round(self.duration_s, 3),
        }


class TreeKiller:
    def __init__(
        self,
        tree: ProcessTree,
        reap: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = 0.05,
    ) -> None:
        self.tree = tree
        self.reap = reap
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s

    def forward(self, sig: int, pid: int, create_time: float) -> bool:
        """Pass ``sig`` (one we received) to the process group led by ``pid``.

        Only while ``pid`` is still the process that was launched (pid plus
        create time) and still a member of the tree; returns whether it was sent.
        """
        key = ProcKey(pid, create_time)
        proc = next((p for p in self.tree.members() if p.pid == pid), None)
        if proc is None or not is_running(proc, key) or same_process(key) is None:
            return False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return False  # exited between the check and the signal
        except PermissionError:
            return False
        return True

    def kill(self, grace: float, kill_timeout: float = 5.0, first_signal: int = signal.SIGTERM) -> KillReport:
        start = self.clock()
        known: dict[ProcKey, psutil.Process] = {}
        described: dict[ProcKey, dict[str, Any]] = {}
        signals: list[dict[str, Any]] = []
        signalled: dict[ProcKey, int] = {}

        def refresh() -> None:
            for proc in self.tree.members():
                try:
                    key = ProcKey.of(proc)
                except psutil.Error:
                    continue
                if key not in known:
                    known[key] = proc
                    described[key] = _describe(proc, key)

        def alive() -> list[ProcKey]:
            return [k for k, p in known.items() if is_running(p, k)]

        def send(sig: int, keys: list[ProcKey]) -> None:
            fresh = [k for k in keys if signalled.get(k) != sig]
            if not fresh:
                return
            ours = {k.pid for k in known}
            for pgid in sorted({described[k]["pgid"] for k in fresh if described[k]["pgid"] > 0}):
                if _group_is_ours(pgid, ours):
                    try:
                        os.killpg(pgid, sig)
                        signals.append(_sig_record(f"pgid {pgid}", sig, self.clock() - start))
                        for k in fresh:
                            if described[k]["pgid"] == pgid:
                                signalled[k] = sig
                    except ProcessLookupError:
                        pass  # the whole group died between the check and the signal
            for key in fresh:
                if signalled.get(key) == sig:
                    continue
                try:
                    known[key].send_signal(sig)  # psutil re-verifies pid + create time
                    signals.append(_sig_record(f"pid {key.pid}", sig, self.clock() - start))
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass  # gone already, or not ours after all: never retry by pid
                signalled[key] = sig

        def wait_until(deadline: float, sig: int) -> list[ProcKey]:
            while True:
                self.reap()
                refresh()
                send(sig, alive())  # newcomers forked while we wait
                remaining = alive()
                if not remaining or self.clock() >= deadline:
                    return remaining
                self.sleep(self.poll_s)

        refresh()
        send(first_signal, alive())
        remaining = wait_until(start + grace, first_signal)
        escalated: list[int] = []
        if remaining:
            waited = self.clock() - start
            for key in remaining:
                d = described[key]
                log.warning(
                    "ignored_sigterm",
                    message=(
                        f"{d['name']} (pid {key.pid}, pgid {d['pgid']}) ignored "
                        f"{signal.Signals(first_signal).name} for {waited:.0f} s; sending SIGKILL"
                    ),
                )
                escalated.append(key.pid)
            send(signal.SIGKILL, remaining)
            remaining = wait_until(self.clock() + kill_timeout, signal.SIGKILL)
        self.reap()
        survivors = []
        for key in remaining:
            d = dict(described[key])
            d["state"] = _state(known[key])
            survivors.append(d)
            log.error(
                "survived_sigkill",
                message=f"{d['name']} (pid {key.pid}) still alive {kill_timeout:.0f} s after SIGKILL, state {d['state']}",
            )
        return KillReport(
            targets=tuple(described[k] for k in sorted(described)),
            signals=tuple(signals),
            escalated=tuple(escalated),
            survivors=tuple(survivors),
            duration_s=self.clock() - start,
        )


def _describe(proc: psutil.Process, key: ProcKey) -> dict[str, Any]:
    try:
        name = proc.name()
    except psutil.Error:
        name = "?"
    try:
        pgid = os.getpgid(key.pid)
    except OSError:
        pgid = -1
    return {"pid": key.pid, "create_time": key.create_time, "pgid": pgid, "name": name}


def _state(proc: psutil.Process) -> str:
    try:
        return proc.status()
    except psutil.Error:
        return "gone"


def _group_is_ours(pgid: int, our_pids: set[int]) -> bool:
    if pgid not in our_pids:
        # The leader is gone or not ours: a group whose leader we cannot vouch
        # for is signalled member by member.
        return False
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.pid not in our_pids:
                return False
        except (OSError, psutil.Error):
            continue
    return True


def _sig_record(target: str, sig: int, at: float) -> dict[str, Any]:
    return {"target": target, "signal": signal.Signals(sig).name, "t": round(at, 3)}
