"""Whole cohort runs through the real runner, with a fake tree per node and the in-memory store.

No process is started: two ``Supervisor`` objects run in threads, each with its own
fake clock (they never agree, on purpose), and speak through one ``MemoryStore``.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from pathlib import Path

import pytest
import structlog

from hangwatch.contract.exitcodes import EXIT_BUDGET, EXIT_COHORT, EXIT_UNKILLABLE
from hangwatch.contract.journal import read_journal
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.runner import Supervisor

from fakes import FakeClock, FakeProbe, FakeTree, MemoryStore, runner_config

pytestmark = pytest.mark.timeout(60)

# Fake time flies while a node waits for the others to join: a fake minute passed in a fraction of a real
# second, so a node whose peer's thread started late on a busy host gave up on it. Joins wait (fake) days;
# the test's own timeout bounds them.
JOIN_S = 1e6


def _node(tmp_path: Path, store: MemoryStore, rank: int, script: list[str], **over) -> tuple[Supervisor, FakeTree]:
    # Each node its own fake time, hours apart: they never agree, on purpose; nothing may compare them.
    clock = FakeClock(1000.0 + 7200.0 * rank, yield_s=0.0005)  # yields: the other node's thread runs
    config = runner_config(tmp_path, run_dir=str(tmp_path / f"run{rank}"), **over)
    config.run_dir.mkdir(parents=True)
    cohort = Cohort(store, Membership(rank, 2, "127.0.0.1", 29600, "job"), {"same": True}, lease_interval=3600,
                    lease_timeout=60, barrier_timeout=300, clock=clock, sleep=clock.sleep, wall=clock)
    # Each attempt's trainer crashes at once, or trains for a (fake) 3 s and exits 0, or hangs; it beats nothing.
    tree = FakeTree(clock, script, train_for=3.0, beats=False)
    sup = Supervisor(config, FakeProbe(), lambda request: None, tree=tree, clock=clock, sleep=clock.sleep, wall=clock,
                     cohort=cohort)
    return sup, tree


def _run_all(sups: list[Supervisor]) -> list[int | None]:
    for s in sups:  # the CLI joins before running
        threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": JOIN_S}).start()
    deadline = time.monotonic() + 20
    while not all(s.cohort.cohort._thread for s in sups) and time.monotonic() < deadline:
        time.sleep(0.01)
    codes: list[int | None] = [None] * len(sups)

    def run(i):
        codes[i] = sups[i].run()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sups))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    for s in sups:
        s.cohort.cohort.close(linger_cap=0)
    return codes


def test_the_restart_limit_on_one_node_stops_every_node_with_its_code(tmp_path):
    """Node 1 allows no restart, node 0 would restart: both give up with node 1's code, and
    node 0 never relaunches alone into a rendezvous node 1 will not join."""
    store = MemoryStore()
    (s0, t0), (s1, t1) = _node(tmp_path, store, 0, ["crash", "train"]), _node(tmp_path, store, 1, ["crash", "train"],
                                                                                max_restarts=0)
    assert _run_all([s0, s1]) == [EXIT_BUDGET, EXIT_BUDGET]
    assert len(t0.launched) == 1 and len(t1.launched) == 1
    last = read_journal(s0.run_dir / "journal.jsonl")[-1]
    assert last["event"] == "run_finished" and last["reason"].startswith("node 1: restart budget exhausted")


def test_a_crash_on_every_node_restarts_every_node_once_with_one_agreement(tmp_path):
    store = MemoryStore()
    (s0, t0), (s1, t1) = _node(tmp_path, store, 0, ["crash", "train"]), _node(tmp_path, store, 1, ["crash", "train"])
    assert _run_all([s0, s1]) == [0, 0]
    for sup, tree in ((s0, t0), (s1, t1)):
        assert [env["HANGWATCH_ATTEMPT"] for env in tree.envs] == ["1", "2"]
        # --recovery auto (the default) in a cohort: the trainer's generator never restarts its engine alone.
        assert sup.config.recovery == "auto" and {env["HANGWATCH_ENGINE_RECOVERY"] for env in tree.envs} == {"job"}
        records = read_journal(sup.run_dir / "journal.jsonl")
        assert len([r for r in records if r["event"] == "cohort_incident"]) == 1
        assert len([r for r in records if r["event"] == "cohort_agreed"]) == 1


class _EarlyHook:
    """A capture hook that offers the early round: records each round's (fake) time."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.early, self.requests = clock, [], []

    def __call__(self, request):
        self.requests.append(request)

    def early_round(self, tree, deadline):
        self.early.append(self.clock())
        return f"round-{len(self.early)}"


def test_a_wedge_on_one_node_starts_the_other_nodes_early_round_before_its_verdict(tmp_path):
    """Node 1's stall, half way through its window, tells node 0, whose own ranks show nothing (they
    wait in their collective): node 0 takes its early round then, not at the announcement."""
    store = MemoryStore()
    (s0, _), (s1, _) = _node(tmp_path, store, 0, ["hang", "train"]), _node(tmp_path, store, 1, ["wedge", "train"])
    hooks = []
    for sup in (s0, s1):
        hooks.append(_EarlyHook(sup.clock))
        sup.capture_hook = hooks[-1]
    assert _run_all([s0, s1]) == [0, 0]
    assert hooks[0].early and hooks[1].early  # node 0's on node 1's heads-up, node 1's on its own stall
    assert len(hooks[0].requests) == 1 and hooks[0].requests[0].verdict.reason.startswith("node 1 announced stall")
    rule = hooks[0].requests[0].extra.get("early_round_rule")
    assert rule in (None, "cohort")  # (None: node 0's fake time flew past the heads-up's window first)
    records = read_journal(s0.run_dir / "journal.jsonl")
    assert [r["announced_wall"] for r in records if r["event"] == "cohort_incident"] != [None]


def test_the_last_record_names_why_the_cohort_cannot_go_on(tmp_path):
    """Node 0's trainer crashed because node 1 was gone: its run_finished said only "trainer
    exited with code 1" (the member_lost record above it had the cause); it names node 1."""
    store = MemoryStore()
    (s0, _), (s1, _) = _node(tmp_path, store, 0, ["crash"]), _node(tmp_path, store, 1, ["train"])
    joins = [threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": JOIN_S}) for s in (s0, s1)]
    for t in joins:
        t.start()
    for t in joins:
        t.join(timeout=20)
    s1.cohort.cohort.why = "node 1's store helper failed"
    s1.cohort.cohort.close()  # node 1 gave up and left
    assert s0.run() == EXIT_COHORT
    s0.cohort.cohort.close(linger_cap=0)
    last = read_journal(s0.run_dir / "journal.jsonl")[-1]
    assert last["event"] == "run_finished" and "node 1's supervisor gave up: node 1's store helper failed" in last["reason"]


def test_node_local_checkpoints_with_no_common_step_resume_every_node_from_scratch(tmp_path):
    """Node-local checkpoint dirs: node 0 finished checkpoint-2, node 1's save of it had not
    completed. No step is complete on every node, so none is agreed: node 0 resumed from its
    own checkpoint-2 while node 1 started from scratch, two ranks at different steps that
    nothing would ever notice. Every node starts from scratch, together."""
    store = MemoryStore()
    for rank, complete in ((0, True), (1, False)):
        ckpt = tmp_path / f"local{rank}" / "checkpoint-2"
        ckpt.mkdir(parents=True)
        if complete:
            (ckpt / "trainer_state.json").write_text('{"global_step": 2}')
    nodes = [_node(tmp_path, store, rank, ["crash", "train"], checkpoint_dir=str(tmp_path / f"local{rank}"))
             for rank in (0, 1)]
    assert _run_all([s for s, _ in nodes]) == [0, 0]
    for sup, tree in nodes:
        assert [env["HANGWATCH_ATTEMPT"] for env in tree.envs] == ["1", "2"]
        assert "HANGWATCH_RESUME_FROM" not in tree.envs[1], tree.envs[1].get("HANGWATCH_RESUME_FROM")


def test_nodes_stopped_with_different_signals_at_once_all_exit_with_the_first_stop(tmp_path):
    """The scheduler's SIGTERM reached node 1 and a Ctrl-C reached node 0 a moment later, before
    node 0 had read node 1's stop: each node exited with its own signal (a real 3-node job
    ended 130, 130, 143), though a job's nodes must agree. The store's first stop decides."""
    store = MemoryStore()
    (s0, _), (s1, _) = _node(tmp_path, store, 0, ["train"]), _node(tmp_path, store, 1, ["train"])
    joins = [threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": JOIN_S}) for s in (s0, s1)]
    for t in joins:
        t.start()
    for t in joins:
        t.join(timeout=20)
    s1.cohort.bind_stop(s1.request_stop)(signal.SIGTERM)
    s1.cohort.cohort.renew()  # node 1's lease round publishes its stop
    s0.cohort.bind_stop(s0.request_stop)(signal.SIGINT)  # node 0's own, before it read node 1's
    codes: list[int | None] = [None, None]

    def run(i, sup):
        codes[i] = sup.run()

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate((s0, s1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    for s in (s0, s1):
        s.cohort.cohort.close(linger_cap=0)
    assert codes == [128 + signal.SIGTERM] * 2
    last = read_journal(s0.run_dir / "journal.jsonl")[-1]
    assert last["outcome"] == "interrupted" and "node 1's supervisor received SIGTERM" in last["reason"], last
    assert "this node's SIGINT came later" in last["reason"]


def test_a_stop_while_waiting_for_a_frozen_node_0s_decision_is_a_stop_at_once(tmp_path):
    """Node 1's trainer crashed; node 0's supervisor is frozen and decides nothing. Ctrl-C on node
    1 waited out the barrier deadline and journaled "no agreement before relaunch" (a lost member)
    before stopping; it stops at once, as interrupted, with nothing else to say."""
    store = MemoryStore()
    (s0, _), (s1, _) = _node(tmp_path, store, 0, ["train"]), _node(tmp_path, store, 1, ["crash"])
    joins = [threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": JOIN_S}) for s in (s0, s1)]
    for t in joins:
        t.start()
    for t in joins:
        t.join(timeout=20)
    handler = s1.cohort.bind_stop(s1.request_stop)
    agree = s1.cohort.cohort.agree

    def stopped_while_waiting(*args, **kw):
        handler(signal.SIGINT)
        return agree(*args, **kw)

    s1.cohort.cohort.agree = stopped_while_waiting
    started = s1.clock()
    assert s1.run() == 128 + signal.SIGINT
    assert s1.clock() - started < 30, "not the barrier deadline (300 s)"
    records = read_journal(s1.run_dir / "journal.jsonl")
    assert not [r for r in records if r["event"] == "member_lost"], records
    assert records[-1]["outcome"] == "interrupted"
    for s in (s0, s1):
        s.cohort.cohort.close(linger_cap=0)


def test_processes_that_survive_sigkill_on_one_node_stop_every_node_with_74(tmp_path):
    """A rank on node 1 survived SIGKILL (stuck in the GPU driver): node 1 gave up with 74 without
    telling the others, so node 0 waited at the restart barrier until node 1 left or the deadline
    passed and exited 75 on "node 1 left". Every node stops with 74 and says why."""
    store = MemoryStore()
    (s0, t0), (s1, t1) = _node(tmp_path, store, 0, ["crash", "train"]), _node(tmp_path, store, 1, ["crash", "train"])
    kill = t1.kill

    def kill_leaving_a_survivor(grace, kill_timeout, launcher=None):
        report = kill(grace, kill_timeout, launcher)
        return dataclasses.replace(report, survivors=({"pid": 4242, "name": "rank", "state": "D"},))

    t1.kill = kill_leaving_a_survivor
    assert _run_all([s0, s1]) == [EXIT_UNKILLABLE, EXIT_UNKILLABLE]
    assert len(t0.launched) == 1, "node 0 never relaunched alone"
    last = read_journal(s0.run_dir / "journal.jsonl")[-1]
    assert last["event"] == "run_finished" and last["reason"].startswith("node 1: 1 process(es) survived SIGKILL")


def test_a_node_that_cannot_relaunch_tells_the_others_why(tmp_path):
    """Both nodes agreed to restart; node 1's launcher could not start for attempt 2 (its
    command gone, its disk full for the attempt's logs). Node 1 exited 2 saying why, but its
    record in the store said nothing: node 0 stopped on "node 1's supervisor stopped (it left
    the cohort)". The others read node 1's own reason, whatever ended its supervisor."""
    from hangwatch.cli.run_wiring import supervise
    from hangwatch.supervisor.contain.launcher import LaunchError

    store = MemoryStore()
    (s0, t0), (s1, t1) = _node(tmp_path, store, 0, ["crash", "hang"]), _node(tmp_path, store, 1, ["crash", "train"])
    node1_left = threading.Event()
    launch0, launch1 = t0.launch, t1.launch

    def launch_gone(argv, env, attempt_dir):
        if env["HANGWATCH_ATTEMPT"] == "2":
            raise LaunchError("cannot start 'torchrun': command not found")
        return launch1(argv, env, attempt_dir)

    def launch_after_node_1_left(argv, env, attempt_dir):
        if env["HANGWATCH_ATTEMPT"] == "2":
            assert node1_left.wait(30)
            s0.cohort.cohort.renew()  # node 0's next lease round reads node 1's record
        return launch0(argv, env, attempt_dir)

    t0.launch, t1.launch = launch_after_node_1_left, launch_gone
    joins = [threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": JOIN_S}) for s in (s0, s1)]
    for t in joins:
        t.start()
    for t in joins:
        t.join(timeout=20)
    codes: list[object] = [None, None]

    def run0():
        codes[0] = s0.run()

    def run1():
        try:
            codes[1] = supervise(s1, s1.config, structlog.get_logger("test"), resumed=False,
                                  guardian_state="armed", containment=None)
        except Exception as exc:  # noqa: BLE001
            codes[1] = exc
        finally:
            s1.cohort.cohort.close(linger_cap=0)
            node1_left.set()

    threads = [threading.Thread(target=run0), threading.Thread(target=run1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    s0.cohort.cohort.close(linger_cap=0)
    assert "command not found" in str(codes[1])
    assert codes[0] == EXIT_COHORT
    last = read_journal(s0.run_dir / "journal.jsonl")[-1]
    assert last["event"] == "run_finished" and \
        "node 1's supervisor gave up: cannot start 'torchrun': command not found" in last["reason"], last


@pytest.mark.slow
def test_a_node_whose_supervisor_fails_tells_the_others_why(tmp_path):
    """hangwatch itself failed on node 1 (exit 70): the others read its error, not "it left"."""
    from hangwatch.cli.run_wiring import supervise

    store = MemoryStore()
    (s0, _), (s1, t1) = _node(tmp_path, store, 0, ["crash"]), _node(tmp_path, store, 1, ["train"])

    def broken_sample():
        raise RuntimeError("sampler broke")

    t1.sample = broken_sample
    joins = [threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": JOIN_S}) for s in (s0, s1)]
    for t in joins:
        t.start()
    for t in joins:
        t.join(timeout=20)
    assert supervise(s1, s1.config, structlog.get_logger("test"), resumed=False, guardian_state="armed",
                      containment=None) == 70
    s1.cohort.cohort.close(linger_cap=0)
    assert s0.run() == EXIT_COHORT
    s0.cohort.cohort.close(linger_cap=0)
    last = read_journal(s0.run_dir / "journal.jsonl")[-1]
    assert "node 1's supervisor gave up: hangwatch failed on node 1: RuntimeError: sampler broke" in last["reason"], last
