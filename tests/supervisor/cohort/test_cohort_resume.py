"""A whole job resumed (--resume) on every node goes on as one: one attempt, one checkpoint, one
policy; a node resumed alone is refused. Whole supervisors over fake trees and the in-memory store."""

from __future__ import annotations

import threading
import time

import pytest

from hangwatch.contract.journal import read_journal
from hangwatch.supervisor.cohort.errors import CohortRefused
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.decide.attempt import GraphPolicy, RunState

from cohort_helpers import resumed_node
from fakes import MemoryStore


@pytest.mark.timeout(60)
def test_a_job_resumed_on_every_node_goes_on_from_one_attempt_checkpoint_and_policy(tmp_path):
    """Each node's journal holds its own view: node 0 counted 3 attempts and turned graphs off
    after a stall; node 1's supervisor died before it launched attempt 3, and its last save
    (step 6) had not completed. Resumed, each node went on from its own view (attempt 4 and 3)
    and, in a cohort, from no checkpoint at all: the job's progress started over. Every node
    now goes on as attempt 4, from step 4 (the newest every node has), graphs off."""
    store = MemoryStore()
    s0, t0, ck0 = resumed_node(tmp_path, store, 0, RunState("r0", attempt=3, policy=GraphPolicy(True, False)), [2, 4, 6])
    s1, t1, ck1 = resumed_node(tmp_path, store, 1, RunState("r1", attempt=2), [2, 4])
    for s in (s0, s1):  # the CLI joins before running
        threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": 1e6}, daemon=True).start()
    deadline = time.monotonic() + 20
    while not all(s.cohort.cohort._thread for s in (s0, s1)) and time.monotonic() < deadline:
        time.sleep(0.01)
    codes: list[int | None] = [None, None]

    def run(i, sup):
        codes[i] = sup.run(resumed=True)

    threads = [threading.Thread(target=run, args=(i, s), daemon=True) for i, s in enumerate((s0, s1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    for s in (s0, s1):
        s.cohort.cohort.close(linger_cap=0)
    assert codes == [0, 0]
    for sup, tree, ckpt in ((s0, t0, ck0), (s1, t1, ck1)):
        assert len(tree.launched) == 1
        env = tree.envs[0]
        assert env["HANGWATCH_ATTEMPT"] == "4"
        assert env.get("HANGWATCH_RESUME_FROM") == str(ckpt / "checkpoint-4")
        assert env["HANGWATCH_CUDAGRAPHS"] == "0"
        agreed = [r for r in read_journal(sup.run_dir / "journal.jsonl") if r["event"] == "cohort_agreed"]
        assert len(agreed) == 1 and agreed[0]["resumed"] and agreed[0]["checkpoint_step"] == 4
        assert agreed[0]["attempt"] == 3 and agreed[0]["cudagraphs"] == "off"


def test_a_node_resumed_alone_into_a_running_or_new_job_is_refused_with_why():
    """A node whose supervisor died, resumed while node 0 still runs the job (or runs a new
    one): refused, saying that a job resumes on every node or on none."""
    for node0, node1, words in ((False, True, "this node resumes its run (--resume), node 0 does not"),
                                (True, False, "node 0 resumes its run (--resume), this node starts a new one")):
        store = MemoryStore()
        nodes = [Cohort(store, Membership(i, 2, "127.0.0.1", 29600, "job"), {"resumed": resumed}, lease_timeout=5)
                 for i, resumed in ((0, node0), (1, node1))]
        errors: list[Exception] = []

        def lead():
            try:
                nodes[0].join(timeout=20)
            except CohortRefused as exc:
                errors.append(exc)

        leader = threading.Thread(target=lead, daemon=True)
        leader.start()
        deadline = time.monotonic() + 10
        while store.data.get("hangwatch/job/leader") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(CohortRefused) as refused:
            nodes[1].join(timeout=20)
        assert words in str(refused.value) and "resumes on every node or on none" in str(refused.value)
        leader.join(timeout=20)  # node 0 reads why node 1 left and stops waiting for it
        assert not leader.is_alive() and errors and "node 1 was refused" in str(errors[0]), errors
        for n in nodes:
            n.close(linger_cap=0)
