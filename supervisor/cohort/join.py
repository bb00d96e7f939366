"""Joining the cohort: one node's way in, from publishing its settings to every node being there.

Node 0 opens a new generation of the cohort's keys (a counter in the store) and
publishes it with its settings; every key of the run lives under it, so a rerun
with the same cohort id on a store that outlived the last run never reads that
run's incidents, agreements or leases. A second supervisor for a rank that
already joined this generation (one restarted in the middle of the job) is
refused: the cohort cannot take a node back mid-job.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any, Callable, Protocol

from hangwatch.supervisor.cohort.errors import CohortRefused, MemberLeft
from hangwatch.supervisor.cohort.membership import Membership, check_resume_args, check_settings
from hangwatch.supervisor.cohort.records import IDS_KEY, SAME_ID, json_object, other_cohort
from hangwatch.supervisor.cohort.store import Store, StoreError


class JoiningNode(Protocol):
    """What a join needs of its node (``node.Cohort``): its store and keys, and its left records."""

    store: Store
    me: Membership
    fingerprint: dict[str, Any]
    launcher: bool
    needs_checkpoint: bool
    lease_timeout: float
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    wall: Callable[[], float]
    _generation: str
    _left: dict[int, dict[str, Any]]

    @property
    def others(self) -> list[int]: ...

    def _root(self, *parts: object) -> str: ...

    def _key(self, *parts: object) -> str: ...

    def _patient(self, call: Callable[..., Any], *args: Any) -> Any: ...

    def _read_left(self, node: int) -> dict[str, Any] | None: ...

    def _leave(self, *, patient: bool = False, **record: Any) -> None: ...


class Join:
    """One node's join: publish its fingerprint, check it against node 0's, wait (bounded) for every node.

    ``spent``: seconds of ``timeout`` already spent reaching the store: the whole start is bounded by it.
    """

    def __init__(self, node: JoiningNode, timeout: float, spent: float) -> None:
        self.node, self.timeout = node, timeout
        self.deadline = node.clock() + max(0.0, timeout - spent)
        self.nonce = f"{id(node):x}-{node.wall():.6f}"
        self.saw_leader = False  # node 0's record was read: a store that goes away now is node 0 that stopped
        # A generation we were refused in may be a finished run's: wait (briefly) for a newer one.
        self.refused_in: str | None = None
        self.refused_until = 0.0
        self.missing = list(range(node.me.nnodes))

    def run(self) -> None:
        node = self.node
        self._say_who()
        self.refused_until = node.clock() + min(self.timeout, node.lease_timeout)
        while True:
            theirs = self._leaders_record()
            generation = str(theirs.get("generation", "")) if theirs is not None else ""
            if theirs is not None and generation not in (self.refused_in, node._generation):
                if not self._take_slot(theirs, generation):
                    continue
            if node._generation and self._all_joined():
                return
            self._give_up_if_late(theirs)
            node.sleep(0.2)

    def _say_who(self) -> None:
        """Say which cohort this node is of; node 0 opens the generation and publishes its settings."""
        node, me = self.node, self.node.me
        # Outside every cohort id's keys: what lets a node started with another --cohort-id (or a
        # default one: $SLURM_JOB_ID on one node, none on another) say so, instead of waiting out
        # the join timeout for a node 0 that is there under another name.
        mine_id = json.dumps({"cohort_id": me.cohort_id, "node": me.node_rank})
        # A call that fails is retried while the store fails for less than the lease (a network blip
        # in a join that may last minutes): one failure said "node 0 closed the cohort store", and
        # this node left a job whose node 0 was fine (the others then took it for lost: 75).
        patient = node._patient
        patient(node.store.set, IDS_KEY + ("leader" if me.is_leader else "joiner"), mine_id)
        if me.is_leader:  # (an add retried may skip a generation: only its newness matters)
            # The counter alone restarts at 1 in every new store: node 0's supervisor hosts it, so a node 0
            # started again on that port (resumed, or a new job under the same cohort id) opened the same
            # generation as the dead one's, and the dead one's other nodes, whose store helpers reconnect
            # to whatever listens there, took it for their own node 0: their incidents killed the new
            # job's healthy ranks, and they never stopped. A random part makes each store's run its own.
            generation = f"{patient(node.store.add, node._root('generation'), 1)}.{uuid.uuid4().hex[:12]}"
            patient(node.store.set, node._root("leader"), json.dumps({**node.fingerprint, "generation": generation,
                                                                      "nonce": self.nonce, "launcher": node.launcher},
                                                                     sort_keys=True))

    def _leaders_record(self) -> dict[str, Any] | None:
        """Node 0's join record, or None while it has not joined (refused if a node 0 of another cohort has)."""
        node, me = self.node, self.node.me
        raw = node._patient(node.store.get, node._root("leader"))
        theirs = json_object(raw, "node 0's join record") if raw is not None else None
        self.saw_leader = self.saw_leader or theirs is not None
        if theirs is None and not me.is_leader:
            # The store is node 0's supervisor's own (one per host and port): a node 0 there under
            # another cohort id is this job's, started with other options, or another job's.
            other = other_cohort(node._patient(node.store.get, IDS_KEY + "leader"), me.cohort_id)
            if other is not None:
                raise CohortRefused(f"node 0 at {me.endpoint} runs the cohort {other!r}, this "
                                    f"node {me.cohort_id!r}: {SAME_ID}")
        return theirs

    def _take_slot(self, theirs: dict[str, Any], generation: str) -> bool:
        """Enter node 0's ``generation``, this node's settings checked against ``theirs``; False when
        another supervisor holds this rank's slot in it."""
        node, me = self.node, self.node.me
        node._generation = generation
        node._left.clear()  # what we read under another generation is not this run's
        try:
            check_settings(node.fingerprint, node.launcher, theirs)
        except CohortRefused as exc:
            # Node 0 stops waiting for us, and says why; but only while our rank's slot is
            # free: a node of another job on the same store and port (same rank, other
            # settings) must not write into this job's records that its node left.
            if node.store.get(node._key("join", me.node_rank)) is None:
                node._leave(finished=False, refused=str(exc))
            raise
        mine = json.dumps({**node.fingerprint, "nonce": self.nonce, "launcher": node.launcher}, sort_keys=True)
        if node._patient(node.store.compare_set, node._key("join", me.node_rank), "", mine) != mine:
            self.refused_in, node._generation = generation, ""
            return False
        return True

    def _all_joined(self) -> bool:
        """Whether every node has joined this generation (their settings then checked as a whole);
        refused when one of them joined and left (stopped while waiting)."""
        node = self.node
        records = {n: node._patient(node.store.get, node._key("join", n)) for n in range(node.me.nnodes)}
        self.missing = [n for n, raw in records.items() if raw is None]
        if not self.missing:
            try:
                node.needs_checkpoint = check_resume_args(records, node.fingerprint, node.launcher)
            except CohortRefused as exc:
                node._leave(finished=False, refused=str(exc))  # every node finds it; a node still waiting reads it
                raise
            return True
        for n in node.others:  # one that joined and left (stopped while waiting) counts too
            left = node._patient(node._read_left, n)
            if left is not None:
                why = str(MemberLeft(n, left))
                node._leave(finished=False, why=why)  # node 0 keeps the store up until it reads this
                raise CohortRefused(why)
        return False

    def _give_up_if_late(self, theirs: dict[str, Any] | None) -> None:
        """Refused once this rank's slot stayed taken, or the join's time is up."""
        node, me = self.node, self.node.me
        now = node.clock()
        if self.refused_in is not None and not node._generation and now >= self.refused_until:
            # The others wait for the rank nobody took: their join timeout says why (a hint only,
            # outside the generation's records: nothing else reads it).
            with contextlib.suppress(StoreError):
                node.store.set(node._root("duplicate", self.refused_in), str(me.node_rank))
            raise CohortRefused(f"node {me.node_rank} already joined this cohort ({me.cohort_id}): two "
                                f"nodes started with --node-rank {me.node_rank}, or one restarted in a running "
                                "job, which a cohort cannot take back: stop every node and start the job again")
        if now >= self.deadline:
            raise self._timed_out(theirs)

    def _timed_out(self, theirs: dict[str, Any] | None) -> CohortRefused:
        """Why the join's time ran out: node 0 never came, or these nodes did not (with any hint the store holds)."""
        node, me = self.node, self.node.me
        if theirs is None:
            unread = getattr(node.store, "ignored", {}).get(node._root("leader"))
            if unread is not None:  # node 0 is there, but its record is none this node can trust
                return CohortRefused(f"node 0's join record at {me.endpoint} could not be read: {unread} (start "
                                     "every node with the same --cohort-secret-file or $HANGWATCH_COHORT_SECRET, "
                                     "or with none on every node)")
            return CohortRefused(f"node 0 did not join within {self.timeout:g} s (is hangwatch run started on node 0, "
                                 f"with --cohort {me.endpoint}?)")
        stray = other_cohort(node.store.get(IDS_KEY + "joiner"), me.cohort_id) if me.is_leader else None
        hint = (f"; a node reached this store under the cohort {stray!r}, this node's is "
                f"{me.cohort_id!r}: {SAME_ID}") if stray is not None else ""
        twice = node.store.get(node._root("duplicate", node._generation)) if node._generation else None
        if twice is not None and twice.isdigit() and len(twice) < 10:
            hint += (f"; a second supervisor started as node {twice} was refused, that rank had joined "
                     f"already: two nodes given --node-rank {twice} (check each node's rank)")
        return CohortRefused(f"nodes {self.missing} did not join within {self.timeout:g} s (is hangwatch run started "
                             f"on every node, with the same --nnodes, --cohort and --cohort-id?){hint}")
