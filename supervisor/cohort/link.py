"""The runner's side of a multi-node cohort: turning the cohort's state into verdicts and journal records.

``node.Cohort`` speaks to the store; ``CohortLink`` is what one attempt asks of
it, at four points of the attempt's lifecycle:

* every tick: ``verdict`` — another node's incident for this attempt, or a lost
  member or store, becomes this node's verdict too; ``building`` tells the others of
  a verdict building here, ``heads_up`` reads theirs (this node's early py-spy round
  is taken then) and ``wake``, between ticks, reads the incident key near a hinted one;
* at a verdict: ``incident`` — announce ours (first node wins) and journal the
  cohort's incident, or journal the loss;
* after the capture: ``captured`` — wait (bounded) for every node's capture, and
  ``evidence_taken`` — the bundle whose process rows this node reports;
* before a relaunch: ``agree`` — the checkpoint step and the policy every node
  relaunches with, or the exit code when the cohort cannot go on; with every
  node's process rows, each node names the same culprit (``cohort_culprit``);
* after the restart policy's decision: ``settle`` — the decision every node
  takes (the job restarts only if every node would).

``bind_stop`` makes a stop signal on any node stop every node.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import structlog

from hangwatch.contract.exitcodes import EXIT_COHORT
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.agreement import Agreement, processes_of
from hangwatch.supervisor.cohort.errors import CohortStopped, LauncherMismatch, signal_name
from hangwatch.supervisor.cohort.launcher import rendezvous_nodes
from hangwatch.supervisor.cohort.likely import HintOnce, IncidentWatch, WatchState
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.decide.restart import AttemptOutcome, Decision

log = structlog.get_logger("hangwatch.cohort")

_HANGS = (VerdictKind.STALL.value, VerdictKind.SILENT_HANG.value)


class _Journal(Protocol):
    def append(self, event: str, **fields: Any) -> Any: ...


class CohortLink:
    def __init__(self, cohort: Cohort, journal: Callable[[], _Journal]) -> None:
        """``journal`` returns the runner's current journal (the CLI may wrap it after start)."""
        self.cohort = cohort
        self._journal = journal
        self._attempt: int | None = None  # the attempt being watched, for records made off the main loop
        # The launcher check (``_launcher_apart``): the attempt it is for, the processes already read,
        # whether a rendezvous worker was found, and when to look again.
        self._launch_check: tuple[int, set[Any], bool, float] = (0, set(), False, 0.0)
        self._evidence: dict[int, Path] = {}  # each attempt's bundle (``evidence_taken``)
        self.watch = IncidentWatch()  # when to read the incident key between ticks (another node's hint)
        self._hints = HintOnce()  # the building verdicts of this node already told

    @property
    def journal(self) -> _Journal:
        return self._journal()

    @property
    def why(self) -> str | None:
        """Why the cohort cannot go on, once this node knows (a lost member, no agreement)."""
        return self.cohort.why

    @property
    def needs_checkpoint(self) -> bool:
        """Whether this node resumes from the agreed checkpoint (not a rollout server's without --resume-arg)."""
        return self.cohort.needs_checkpoint

    @property
    def node_rank(self) -> int:
        return self.cohort.me.node_rank

    def gave_up(self, reason: str) -> None:
        """This node's supervisor cannot go on (its launcher would not start, its journal could not
        be written, hangwatch itself failed): the others read why in its record as it leaves,
        rather than "node 1's supervisor stopped"."""
        self.cohort.why = self.cohort.why or reason[:1000]

    def joined(self) -> None:
        me = self.cohort.me
        self.journal.append("cohort_joined", node_rank=me.node_rank, nnodes=me.nnodes, cohort_id=me.cohort_id,
                            store=f"{me.endpoint}", hosts_store=me.is_leader, engine_recovery=ENGINE_RECOVERY_OFF,
                            authenticated=self.cohort.store.sealer.authenticated)
        log.info("cohort_joined", message=(f"cohort of {me.nnodes} nodes joined; engine-level recovery is off in a "
                                           f"cohort: {ENGINE_RECOVERY_OFF}"))
        if not self.cohort.store.sealer.authenticated:
            self.journal.append("cohort_unauthenticated", reason=UNAUTHENTICATED)
            log.warning("cohort_unauthenticated", message=f"cohort: {UNAUTHENTICATED}")
        if me.is_leader and getattr(self.cohort.store.inner, "bound", None) == "all":
            self.journal.append("cohort_store_binds_all", host=me.host, reason=STORE_BINDS_ALL)
            log.warning("cohort_store_binds_all", message=f"cohort: {STORE_BINDS_ALL}")
        store = self.cohort.store
        for key, why in list(store.ignored.items()):  # (seen while joining, before this journal)
            self._ignored(key, why)
        store.on_ignored = self._ignored

    def _ignored(self, key: str, why: str) -> None:
        """A value in the store no node of this job wrote (or none can read safely): ignored, said once per key."""
        self.journal.append("cohort_value_ignored", key=key[:200], why=why)
        log.warning("cohort_value_ignored", message=f"cohort: ignored the store's value under {key[:200]!r}: {why}")

    def verdict(self, attempt: int, now: float, tree: Any = None) -> Verdict | None:
        """Another node's incident for this attempt, or a lost member/store: our verdict too.

        ``tree`` (``describe()``): this node's processes, to check that its launcher's
        rendezvous is the cohort's (``_launcher_apart``).
        """
        self._attempt = attempt
        problem = self.cohort.store_lost()  # judged here too: a store that does not answer holds its client
        if problem is None and tree is not None:
            problem = self._launcher_apart(attempt, now, tree)
        if problem is not None:
            return Verdict(VerdictKind.COHORT_LOST, now, now, str(problem), evidence={"cohort": problem.reason})
        ann = self.cohort.poll(attempt)
        if ann is None or ann.node == self.node_rank:
            return None
        # A crash elsewhere leaves our ranks hung in a collective: capture them as a hang.
        kind = VerdictKind(ann.kind) if ann.kind in _HANGS else VerdictKind.SILENT_HANG
        return Verdict(kind, now, now, f"node {ann.node} announced {ann.kind}: {ann.reason}",
                       evidence={"cohort_incident": ann.to_json()})

    def _launcher_apart(self, attempt: int, now: float, tree: Any) -> LauncherMismatch | None:
        """This node's launcher trains apart from the cohort: its workers joined a rendezvous of
        another node count (``GROUP_WORLD_SIZE``, set by torchrun and accelerate for every worker).

        A launcher started with its own --rdzv-endpoint, --rdzv-id or --nnodes on one node formed
        a job of its own: it trained alone, saving into the shared checkpoint directory, and
        finished, while the other nodes' launchers waited for it in their rendezvous, unwatched
        (no rank beats before it), until torchrun's join timeout (600 s by default). Each process
        is read once (its environment is fixed at exec: once per command line, for a process seen
        between its fork and its exec); looked at every 2 s until a worker is found.
        """
        checked_for, seen, found, next_at = self._launch_check
        if checked_for != attempt:
            seen, found, next_at = set(), False, 0.0
        if found or now < next_at or not self.cohort.launcher:
            # (A node that runs no launcher, a rollout or reward server's, joins no rendezvous.)
            self._launch_check = (attempt, seen, found, next_at)
            return None
        expected = self.cohort.launcher_nodes()
        if expected is None:  # the store cannot say now: looked at again at the next check
            self._launch_check = (attempt, seen, found, now + LAUNCH_CHECK_EVERY_S)
            return None
        mismatch = None
        try:
            procs = list(tree.describe())[:MAX_LAUNCH_CHECK]
        except Exception:  # noqa: BLE001  (a tree that cannot be listed now is listed again at the next look)
            procs = []
        for proc in procs:
            key = (proc.pid, proc.create_time, tuple(proc.cmdline))  # read again once it has exec'd
            if key in seen:
                continue
            seen.add(key)
            size = rendezvous_nodes(proc.pid)
            if size is None:
                continue
            found = True
            nnodes = self.cohort.me.nnodes
            # Fewer nodes than the recognised launchers: this one trains apart. More launchers than
            # recognised is fine (one behind a wrapper script), but never more nodes than the cohort.
            if size < expected or size > nnodes:
                of = f"{nnodes}" if expected == nnodes else f"{nnodes}, {expected} of them running a launcher"
                mismatch = LauncherMismatch(
                    f"node {self.node_rank}'s launcher formed a rendezvous of {size} node(s) (GROUP_WORLD_SIZE={size} "
                    f"in its worker pid {proc.pid}), but the cohort has {of}: that node's torchrun --nnodes, "
                    "--rdzv-endpoint or --rdzv-id differ from the other nodes' (it trains apart from them); start "
                    "every node's launcher with the same ones")
                self.cohort.problem = self.cohort.problem or mismatch
                self.cohort.leave(str(mismatch))  # the others' launchers wait for this node's: tell them now
            break
        self._launch_check = (attempt, seen if len(seen) < 4096 else set(), found, now + LAUNCH_CHECK_EVERY_S)
        return mismatch

    # -- learning of another node's incident between ticks (``likely.py``) -------------

    def building(self, attempt: int, building: tuple[str, float, float] | None, now: float) -> None:
        """A verdict building here (``Detector.building``): once half way, tell the others (once)."""
        seconds = self._hints.due(attempt, building, now)
        if seconds is not None and building is not None:
            self.cohort.hint(attempt, building[0], seconds)

    def heads_up(self, attempt: int, now: float) -> float | None:
        """Another node's new hint of a verdict building: until when an early round taken now
        belongs to its incident (this node's clock); None: nothing new."""
        self.watch.start(attempt)
        if self.watch.state is WatchState.OPEN or self.cohort.store.failing_since is not None:
            return None  # (a failing store's call waits for its deadline: the tick's own poll is enough)
        found = self.cohort.read_hint(attempt)
        return None if found is None else self.watch.hinted(found, self.node_rank, now)

    def wake(self, attempt: int, now: float) -> bool:
        """Between ticks: whether another node has announced this attempt's incident (the store is
        read only near a hinted one, every ``IncidentWatch.fast`` s)."""
        self.watch.start(attempt)
        if not self.watch.due(now) or self.cohort.store.failing_since is not None:
            return False
        ann = self.cohort.poll(attempt)
        if ann is None or ann.node == self.node_rank:
            return False
        self.watch.announced()
        return True

    def incident(self, attempt: int, verdict: Verdict) -> None:
        """Announce a local incident (first node wins) and journal the cohort's incident."""
        if verdict.kind is VerdictKind.DONE:
            self.cohort.finish(attempt)  # our silence from now on is no loss to the others
            return
        # A crash here may be another node's stop reaching our ranks: read the stop first.
        if self.cohort.local_stop is not None or self.cohort.refresh_stop() is not None:
            self.cohort.mark_captured(attempt)  # a stop, not an incident: the stop itself tells the others
            return
        if verdict.kind is VerdictKind.COHORT_LOST:
            self.cohort.why = self.cohort.why or verdict.reason  # the others read why we left
            self.journal.append("member_lost", attempt=attempt, reason=verdict.reason,
                                cause=verdict.evidence.get("cohort"))
            log.error("member_lost", message=f"cohort: {verdict.reason}; capturing, killing and stopping")
            return
        ann = verdict.evidence.get("cohort_incident") if verdict.evidence else None
        if ann is None:
            try:
                ann = self.cohort.announce(attempt, verdict.kind.value, verdict.reason, dict(verdict.evidence)).to_json()
            except Exception as exc:  # noqa: BLE001  (a store hiccup must not stop the local recovery)
                log.warning("cohort_announce_failed", message=f"could not announce the incident to the cohort: {exc}")
                return
        if not verdict.kind.is_hang:
            self.cohort.mark_captured(attempt)  # a crash leaves nothing to capture here: nobody waits for us
        first = ann["node"] == self.node_rank
        self.journal.append("cohort_incident", attempt=attempt, announced_by=ann["node"], kind=ann["kind"],
                            reason=ann["reason"], suspect_node=ann["node"], this_node_first=first,
                            announced_wall=ann.get("wall"), suspect_evidence=ann.get("evidence") or {})
        log.error("cohort_incident", message=(
            f"cohort incident in attempt {attempt}: node {ann['node']} {ann['kind']}" + (" (this node)" if first else "")))

    def wants_capture(self, verdict: Verdict) -> bool:
        """Whether this verdict's tree is worth its stacks before the kill. Not a launcher that trains
        apart from the cohort: nothing hangs there, and every second of a capture is a second more of
        a job of its own saving into the shared checkpoint directory."""
        return (verdict.evidence or {}).get("cohort") != LauncherMismatch.reason

    def captured(self, attempt: int, timeout: float) -> None:
        """Kill only once every node has its stacks: the first node's kill would otherwise
        wake its peers out of the collective they hang in, and their evidence with it."""
        if self.cohort.store.cut:
            return  # the store is gone: no node can say it captured; this node kills at once
        if self.cohort.all_captured(attempt, timeout=timeout) is None:
            log.warning("cohort_capture_wait", message=(
                f"not every node reported its capture within {timeout:.0f} s; killing anyway"))

    def evidence_taken(self, attempt: int, bundle: Path | None) -> None:
        """The attempt's bundle: its process rows go into this node's report (``agree``)."""
        if bundle is not None:
            self._evidence[attempt] = bundle

    def agree(self, attempt: int, verdict: Verdict, steps: Sequence[int],
              policy: GraphPolicy) -> tuple[Agreement | None, int | None]:
        """Before any node relaunches: node 0's decision, or the exit code when the cohort cannot go on."""
        if verdict.kind is VerdictKind.COHORT_LOST:
            return None, EXIT_COHORT
        try:
            agreed = self.cohort.agree(attempt, steps, policy, bundle_rows(self._evidence.pop(attempt, None)))
        except CohortStopped:
            return None, EXIT_COHORT  # journaled when the stop was seen; the runner finishes as interrupted
        except Exception as exc:  # noqa: BLE001  (CohortError or any store failure ends the cohort)
            return self._no_agreement(attempt, f"no agreement before relaunch: {exc}", exc)
        self.journal.append("cohort_agreed", **_without_rows(agreed.to_json()))
        self._name_culprit(attempt, agreed)
        return agreed, None

    def _name_culprit(self, attempt: int, agreed: Agreement) -> None:
        """Every node reads the same rows, so every node's journal names the same culprit."""
        namer = self.cohort.name_culprit
        rows = processes_of(agreed.reports)
        if namer is None or not rows:
            return
        try:
            culprit = namer(rows)
        except Exception as exc:  # noqa: BLE001  (naming is evidence: it must not stop a relaunch)
            log.warning("cohort_culprit_failed", message=f"could not name the culprit across nodes: {exc!r}")
            return
        if not culprit:
            return
        self.journal.append("cohort_culprit", attempt=attempt, **culprit)
        if culprit.get("present") is False:
            log.warning("cohort_culprit", message=f"attempt {attempt}: {culprit.get('note')}")
        else:
            log.error("cohort_culprit", message=(
                f"attempt {attempt}: the culprit is rank {culprit.get('rank')} on node {culprit.get('node')} "
                f"(pid {culprit.get('pid')}): {culprit.get('reason')}"))

    def _no_agreement(self, attempt: int, why: str, exc: BaseException) -> tuple[None, int]:
        """The nodes could not agree: this node leaves saying why, and the job stops (75)."""
        self.cohort.why = self.cohort.why or why
        self.journal.append("member_lost", attempt=attempt, reason=why, cause=getattr(exc, "reason", "store_error"))
        log.error("member_lost", message=f"cohort: {why}; stopping")
        return None, EXIT_COHORT

    def resume(self, attempts: int, steps: Sequence[int], policy: GraphPolicy) -> tuple[Agreement | None, int | None]:
        """A job resumed on every node: what every node goes on from (``Cohort.resume``), or the
        exit code when the cohort cannot agree."""
        try:
            agreed = self.cohort.resume(attempts, steps, policy)
        except CohortStopped:
            return None, EXIT_COHORT
        except Exception as exc:  # noqa: BLE001  (CohortError or any store failure ends the cohort)
            return self._no_agreement(attempts, f"no agreement on resuming the job: {exc}", exc)
        # As the agreement after attempt N reads (``attempt``: the one it follows), with ``resumed``.
        self.journal.append("cohort_agreed", **{**agreed.to_json(), "attempt": agreed.attempts, "resumed": True})
        log.info("cohort_agreed", message=(
            f"resuming the job on every node after attempt {agreed.attempts}: "
            + (f"checkpoint step {agreed.checkpoint_step}" if agreed.checkpoint_step is not None else
               "no checkpoint complete on every node") + f", {agreed.policy.describe()}"))
        return agreed, None

    def settle(self, outcome: AttemptOutcome, decision: Decision) -> Decision:
        """The restart policy's decision, made the same on every node (``agreement.settled``).

        A finished trainer needs no one's agreement. The journal says when another
        node's decision stops this one.
        """
        if outcome.kind is VerdictKind.DONE:
            return decision
        mine = {"restart": decision.restart, "exit_code": decision.exit_code, "reason": decision.reason,
                "delay_s": decision.delay_s}
        try:
            together = self.cohort.settle(outcome.attempt, mine)
        except CohortStopped:
            sig, why = self.job_stop(int(signal.SIGTERM))
            return Decision(False, f"multi-node cohort: {why}", 128 + sig)
        except Exception as exc:  # noqa: BLE001  (CohortError or any store failure ends the cohort)
            self.cohort.why = self.cohort.why or f"no agreement on restarting: {exc}"
            self.journal.append("member_lost", attempt=outcome.attempt, reason=f"no agreement on restarting: {exc}",
                                cause=getattr(exc, "reason", "store_error"))
            log.error("member_lost", message=f"cohort: no agreement on restarting: {exc}; stopping")
            return Decision(False, f"multi-node cohort: no agreement on restarting: {exc}", EXIT_COHORT)
        if together["restart"]:
            return Decision(True, decision.reason, None, max(decision.delay_s, together["delay_s"]))
        if together["node"] == self.node_rank:
            return decision
        return Decision(False, f"node {together['node']}: {together['reason']} (every node of the cohort stops with it)",
                        together["exit_code"])

    def job_stop(self, received: int) -> tuple[int, str]:
        """The signal every node of a stopped job exits with (128 + it), and why, for ``run_finished``.

        The store's first stop: a node stopped with SIGINT while another was stopped with
        SIGTERM a moment earlier exits like that one (``received`` is this node's own).
        """
        info = self.cohort.job_stop()
        own = self.cohort.local_stop
        if info is None or info["node"] == self.node_rank or (own is not None and own == info["signal"]):
            sig = received if info is None else info["signal"]  # (a stop that reached every node: SIGTERM from scancel)
            return sig, f"supervisor received {signal_name(sig)}"
        why = f"node {info['node']}'s supervisor received {signal_name(info['signal'])}: the whole job stops"
        if own is not None:
            why += f" (this node's {signal_name(own)} came later)"
        return info["signal"], why

    def bind_stop(self, request_stop: Callable[..., None]) -> Callable[..., None]:
        """Wire a stop on any node to every node; returns this node's signal handler.

        The handler only notes the signal (the lease thread tells the others: no I/O in
        a signal handler) and stops this node as before. A stop seen from another node
        is journaled (``member_lost``, cause ``stopped``) and stops this node the same way.
        """
        def stopped_elsewhere(info: dict[str, Any]) -> None:
            name = signal_name(info["signal"])
            reason = f"node {info['node']}'s supervisor received {name}: the whole job stops"
            try:
                self.journal.append("member_lost", attempt=self._attempt, reason=reason, cause="stopped",
                                    node=info["node"], signal=name)
            finally:
                log.warning("cohort_stop", message=f"cohort: {reason}; stopping this node too")
                request_stop(info["signal"])

        def handler(signum: int, frame: Any = None) -> None:
            if self.cohort.local_stop is None:
                self.cohort.local_stop = signum
            request_stop(signum, frame)

        self.cohort.on_stop = stopped_elsewhere
        return handler


UNAUTHENTICATED = ("the cohort is unauthenticated: anyone who reaches the store's port can list, read, overwrite "
                   "and erase its records and write forged ones (a forged stop or incident acts on every node; an "
                   "erased record can end the job with 75); give every node the same "
                   "secret with --cohort-secret-file or $HANGWATCH_COHORT_SECRET (docs/multinode.md)")
STORE_BINDS_ALL = ("the --cohort host is no address of this machine, so the store listens on every interface: limit "
                   "its port to the job's nodes with a firewall rule (docs/multinode.md)")

MAX_LAUNCH_CHECK = 256  # processes looked at per check
LAUNCH_CHECK_EVERY_S = 2.0

ENGINE_RECOVERY_OFF = ("an engine restart on one node would desynchronise the ranks of the others; every incident "
                       "restarts the whole job from the agreed checkpoint")



#: the largest classification a bundle's rows are read from (a node's own bundle, written by its capture)
MAX_CLASSIFICATION_BYTES = 4 << 20


def bundle_rows(bundle: Path | None) -> list[dict[str, Any]]:
    """The process rows of a bundle's classification (``classification.json``); none when it has none."""
    if bundle is None:
        return []
    try:
        with open(bundle / "classification.json", "rb") as f:
            raw = f.read(MAX_CLASSIFICATION_BYTES + 1)
        if len(raw) > MAX_CLASSIFICATION_BYTES:
            return []
        rows = json.loads(raw).get("process_rows")
    except (OSError, ValueError, AttributeError, RecursionError):
        return []  # no stacks were captured, or an older bundle: nothing to report
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _without_rows(agreed: dict[str, Any]) -> dict[str, Any]:
    """An agreement as journaled: the reports without their process rows (``cohort_culprit`` says what they mean)."""
    reports = agreed.get("reports") or {}
    return {**agreed, "reports": {n: ({k: v for k, v in r.items() if k != "processes"} if isinstance(r, dict) else r)
                                  for n, r in reports.items()}}
