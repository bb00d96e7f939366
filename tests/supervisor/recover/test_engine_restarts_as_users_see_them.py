"""Level 1 as users hit it, with fakes: what the journal, status and the run report say of an
engine restart (a hang after its retried rollouts came back, a restart the generator decided
alone), and two ranks' workers stuck in the same weight load; the runner in process with a
scripted tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangwatch.cli.goodput import goodput
from hangwatch.cli.run_summary import _engine_restarts, render_status, summarise
from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.heartbeat import Heartbeat, beat, read_heartbeat
from hangwatch.contract.journal import Journal, read_journal
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.decide.attempt import GraphPolicy, RecoveryLevel, RecoverySituation, recovery_level
from hangwatch.supervisor.config import SETTINGS, build
from hangwatch.supervisor.recover.engine_level import EngineLevel, engines_in_a_call, stuck_engine
from hangwatch.supervisor.watch.probes import NoProbe
from hangwatch.supervisor.runner import Supervisor
import json
from hangwatch.contract import env as names
from hangwatch.supervisor.decide.attempt import RunState

from fakes import FakeClock, FakeTrainer, FakeTree

pytestmark = pytest.mark.timeout(30)


def test_a_hang_of_the_trainers_own_after_the_retried_rollouts_came_back_leaves_the_engine_recovered(tmp_path: Path):
    """The engine restart worked (the retried rollouts came back), then the trainer's own threads
    stalled in that very step (level 2). The journal once had no engine_recovered for it: status
    said 'no progress after it' and the run report 'not recovered'."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step",
                      evidence={"step": 17})
    assert level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", frozenset({20})),
                         verdict, tmp_path / "control.json", None)
    back = Heartbeat(1000, 9, 0.0, 17, "train", {"engine_restarts": 1, "rollouts_ok": 1, "cudagraphs": "off"})
    level.observe(1, Sample(t=103.0, wall=103.0, cpu_pct={}, gpu=None, heartbeat=back))
    assert not level.unrecovered(1), "the retry came back: a hang now is not the retry failing"
    level.ended(1, back, 110.0, hang=True)  # the runner, at the new (level 2) verdict
    (recovered,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert recovered["before_hang"] and not recovered.get("at_exit")
    assert recovered["onset_to_progress_s"] == 103.0 - 96.0, "timed when the rollouts were seen back"
    assert recovered["engine"]["cudagraphs"] == "off"
    (shown,) = _engine_restarts(read_journal(tmp_path / "journal.jsonl"))
    assert shown["recovered"] and shown["recovered_before_hang"]


def test_the_run_report_times_an_engine_recovery_from_its_record_and_names_the_level():
    """An engine_recovered journaled at the next hang is timed by its own onset_to_progress_s, not
    by when it was written; the next incident is the job's own."""
    T = 1_700_000_000.0
    r = {"run_id": "abc"}
    records = [
        {**r, "event": "run_started", "ts": T, "pid": 1},
        {**r, "event": "attempt_started", "ts": T + 1, "attempt": 1, "pid": 2},
        {**r, "event": "first_heartbeat", "ts": T + 11, "attempt": 1, "step": 1},
        {**r, "event": "incident", "ts": T + 641, "attempt": 1, "kind": "stall", "onset_wall": T + 611},
        {**r, "event": "recovery", "ts": T + 643, "attempt": 1, "level": 1, "scope": "engine", "reason": "x"},
        {**r, "event": "engine_restart", "ts": T + 643, "attempt": 1, "ok": True},
        {**r, "event": "engine_recovered", "ts": T + 700, "attempt": 1, "step": 17, "onset_to_progress_s": 40.0,
         "before_hang": True},
        {**r, "event": "incident", "ts": T + 700, "attempt": 1, "kind": "stall", "onset_wall": T + 670},
        {**r, "event": "attempt_ended", "ts": T + 702, "attempt": 1, "kind": "stall", "exit_code": -9},
    ]
    g = goodput(records)
    assert [(i.get("level"), i["time_to_recover_s"]) for i in g["incidents"]] == [(1, 40.0), (None, None)]


def test_an_engine_restart_the_generator_decided_alone_is_timed_and_stepped_from_its_own_beat(tmp_path: Path):
    """No verdict came (the generator's own generate timeout): its beats say which step's rollout
    wedged and when its request began and its worker died. The journal once took the first beat
    the supervisor saw of it, often steps later: the wedged step read 3 for 2, and the recovery
    0.25 s for two timeouts' worth of lost time."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 0.0, kill_timeout=5.0)
    wall = 1_800_000_000.0
    info = {"engine_restarts": 1, "engine_restart_by": "generator", "cudagraphs": "off", "rollouts_ok": 1,
            "engine_restart_step": 2, "engine_restart_onset_wall": wall - 20.0, "engine_restart_killed_wall": wall - 5.0}
    seen = Heartbeat(1000, 9, 0.0, 4, "train", info)  # the trainer is two steps on already
    assert level.observe(1, Sample(t=500.0, wall=wall, cpu_pct={}, gpu=None, heartbeat=seen)) is not None
    records = read_journal(tmp_path / "journal.jsonl")
    (restart,) = [r for r in records if r["event"] == "engine_restart"]
    assert restart["step"] == 2 and restart["onset_to_killed_s"] == 15.0
    (recovered,) = [r for r in records if r["event"] == "engine_recovered"]
    assert recovered["onset_to_progress_s"] == 20.0 and recovered["kill_to_progress_s"] == 5.0
    assert level.last_restart == 495.0, "the retry window counts from the worker's death"


def test_a_generators_restart_times_that_are_not_times_fall_back_to_the_beat(tmp_path: Path):
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 0.0, kill_timeout=5.0)
    wall = 1_800_000_000.0
    for n, (began, killed) in enumerate([(wall + 3600, wall + 3700), (wall - 5, wall - 20), ("x", None),
                                         (float("nan"), wall - 1), (True, wall - 1)]):
        info = {"engine_restarts": n + 1, "engine_restart_by": "generator", "cudagraphs": "off",
                "engine_restart_onset_wall": began, "engine_restart_killed_wall": killed}
        level.observe(1, Sample(t=500.0 + n, wall=wall, cpu_pct={}, gpu=None,
                                heartbeat=Heartbeat(1000, n, 0.0, 2, "generate", info)))
        assert level.last_restart == 500.0 + n
    restarts = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]
    assert [r["onset_to_killed_s"] for r in restarts] == [0.0] * 5 and {r["step"] for r in restarts} == {2}


def test_two_ranks_workers_wedged_in_the_same_weight_load_are_one_wedge(tmp_path: Path):
    """Two ranks on a node, both workers stuck in the same load: the first verdict restarts one
    worker; the second names the other by its own beat (``waiting_on``, no request in flight).
    It was in its load under the old policy at the first restart, so it is the same wedge: level 1
    again with the same policy. It was taken for a second wedge within the retry window: the job
    was restarted, with enforce_eager."""

    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    beacons = tuple(Heartbeat(pid, 3, 0.0, 1, "load", {}) for pid in (20, 30)) + \
        (Heartbeat(40, 1, 0.0, 0, "idle", {}),)  # a standby, asleep
    at_first = Sample(t=100.0, wall=100.0, cpu_pct={}, gpu=None, engine=beacons)
    assert engines_in_a_call(at_first) == {20, 30}
    first = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="stall",
                    evidence={"step": 1, "waiting_on": 20, "waiting_on_phase": "load", "waiting_on_silent_s": 4.0})
    assert level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "load", frozenset({20})), first,
                         tmp_path / "control.json", None, in_flight=engines_in_a_call(at_first))
    second = {"step": 1, "waiting_on": 30, "waiting_on_phase": "load", "waiting_on_silent_s": 8.0, "engine_beats": 2}
    same = level.ran_old_policy(1, stuck_engine(second))
    assert same, "the other rank's worker stuck in the same load"
    tree = [TreeProcess(pid, 0.0, 1, pid, pid, "python", ("python", "-m", "hangwatch.generator.worker"))
            for pid in (30, 40)]
    decided = recovery_level(RecoverySituation(VerdictKind.STALL, mode="auto", phase="restore", tree=tree, trainer_pgid=1,
                             last_engine_restart=100.0, now=104.0, retry_window=1800.0, evidence=second,
                             window=3.0, engines_beat=True, retry_pending=False, same_wedge=same))
    assert decided.level == 1 and decided.engine_pgids == {30}


def test_the_run_report_counts_an_engine_restart_the_generator_decided_alone_as_lost():
    """No verdict came (the generator's own timeout): the time from its failed request to the
    trainer's next step is lost all the same. The report once counted it as progress, with no
    incident listed (88 % goodput for a run that spent 15 s of its 24 wedged)."""
    T = 1_700_000_000.0
    r = {"run_id": "abc"}
    records = [
        {**r, "event": "run_started", "ts": T, "pid": 1},
        {**r, "event": "attempt_started", "ts": T + 1, "attempt": 1, "pid": 2},
        {**r, "event": "first_heartbeat", "ts": T + 11, "attempt": 1, "step": 1},
        {**r, "event": "engine_restart", "ts": T + 500, "attempt": 1, "ok": True, "by": "generator", "backstop": True,
         "onset_to_killed_s": 300.0},
        {**r, "event": "engine_recovered", "ts": T + 510, "attempt": 1, "step": 18, "onset_to_progress_s": 310.0,
         "kill_to_progress_s": 10.0, "backstop": True},
        {**r, "event": "attempt_ended", "ts": T + 1011, "attempt": 1, "kind": "done", "exit_code": 0},
        {**r, "event": "run_finished", "ts": T + 1011, "outcome": "success", "exit_code": 0, "reason": "ok"},
    ]
    g = goodput(records)
    assert (g["hung_s"], g["recovery_s"], g["productive_s"]) == (300.0, 10.0, 1000.0 - 310.0)
    assert [(i["level"], i["time_to_recover_s"], i["latency_s"]) for i in g["incidents"]] == [(1, 310.0, 300.0)]


# -- the runner, in process: a scripted tree with an engine worker --------------------------------

class _EngineTree(FakeTree):
    """Attempt 1: the trainer (pid 4001) beats steps 1-3, then waits in ``generate`` on its engine
    worker (pid 50), stuck in a request (GPU busy, CPU idle). Once the worker's group is killed,
    the trainer's generator beats that the retried rollouts came back, then its own threads stall
    in that step. Later attempts train to the end. (A scenario of its own over the shared
    ``FakeTree``: its kills are reported and recorded as that one's.)"""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.attempt = 0
        self.seq = 0
        self.phase = "steps"  # steps -> engine_wedge -> retried -> trainer_wedge -> killed | done
        self.heartbeat: str | None = None
        self.engine_killed = False

    def launch(self, argv, env, attempt_dir):
        self.attempt += 1
        self.heartbeat = env["HANGWATCH_HEARTBEAT"]
        self.phase = "steps" if self.attempt == 1 else "done"
        self.started = self.clock()
        self.trainer = FakeTrainer(4000 + self.attempt, self.clock(), attempt_dir / "stdout.log", attempt_dir / "stderr.log")
        return self.trainer

    def exit_code(self, trainer):
        if self.phase == "killed":
            return -9
        if self.phase == "done" and self.clock() - self.started > 5:
            return 0
        return None

    def _beat(self, step: int, phase: str, **info) -> None:
        beat(step=step, phase=phase, path=self.heartbeat, **info)

    def sample(self) -> Sample:
        t, pid = self.clock(), self.trainer.pid
        busy, engine = False, ()
        if self.phase in ("steps", "done"):
            self.seq += 1
            step = self.seq if self.phase == "done" else min(self.seq, 3)
            if self.phase == "steps" and self.seq > 3:
                self.phase = "engine_wedge"
                self._beat(3, "generate", cudagraphs="on")
            else:
                self._beat(step, "train")
        if self.phase == "engine_wedge":
            busy = True
            engine = (Heartbeat(50, 1, 0.0, 7, "generate", {}),)
        elif self.phase == "retried":
            self._beat(3, "train", cudagraphs="off", engine_restarts=1, rollouts_ok=1, engine_worker="cold")
            self.phase = "trainer_wedge"
        elif self.phase == "trainer_wedge":
            busy = True
        cpu = {pid: 0.0 if busy else 100.0}
        if self.phase == "engine_wedge":
            cpu[50] = 0.0
        return Sample(t=t, wall=t, cpu_pct=cpu, gpu=(DeviceSample(0, 100.0 if busy else 50.0, 1000.0, (pid,)),),
                      heartbeat=read_heartbeat(self.heartbeat), tree_size=len(cpu), engine=engine)

    def describe(self):
        out = [TreeProcess(self.trainer.pid, 0.0, 1, self.trainer.pid, self.trainer.pid, "python", ("python", "t.py"))]
        if not self.engine_killed and self.attempt == 1:
            out.append(TreeProcess(50, 0.0, self.trainer.pid, 50, 50, "python",
                                   ("python", "-m", "hangwatch.generator.worker")))
        return out

    def kill_groups(self, pgids, grace, kill_timeout):
        assert pgids == {50}
        self.engine_killed, self.phase = True, "retried"
        return super().kill_groups(pgids, grace, kill_timeout)

    def kill(self, grace, kill_timeout, launcher=None):
        self.phase = "killed"
        return super().kill(grace, kill_timeout, launcher)


def test_the_runner_journals_the_engine_recovered_before_a_hang_of_the_trainers_own_in_the_retried_step(tmp_path):

    records = _run_supervisor(tmp_path, _EngineTree)
    events = [r["event"] for r in records]
    assert [r["level"] for r in records if r["event"] == "recovery"] == [1, 2]
    first, second = [i for i, e in enumerate(events) if e == "incident"]
    assert "engine_recovered" in events[first:second], "the engine restart worked: its rollouts came back"
    (recovered,) = [r for r in records if r["event"] == "engine_recovered"]
    assert recovered["before_hang"] and recovered["engine"]["cudagraphs"] == "off"
    assert [r["ok"] for r in records if r["event"] == "engine_restart"] == [True]
    assert "its retried rollouts came back" in render_status(summarise(tmp_path / "run" / "journal.jsonl"))


class _TwoLoadsTree(_EngineTree):
    """Two ranks on a node, one attempt: after steps 1-3 both engine workers (50, 60) wedge in the
    same weight load (their own beats say ``load``; GPU busy, CPU idle). Killing 50 lets its rank
    beat that its retried rollouts came back (the shared file's last beat, phase ``restore``);
    60 stays stuck until it is killed too; then both ranks train on to the end."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.killed: set[int] = set()

    def sample(self) -> Sample:
        t, pid = self.clock(), self.trainer.pid
        if self.phase == "steps":
            self.seq += 1
            if self.seq > 3:
                self.phase = "load_wedge"
                self._beat(3, "load", cudagraphs="on", engine_worker_pid=50)
            else:
                self._beat(self.seq, "train")
        elif self.phase == "retried":
            self._beat(3, "restore", cudagraphs="off", engine_restarts=1, rollouts_ok=1, engine_worker="cold")
            self.phase = "load_wedge"
        elif self.phase == "done":
            self.seq += 1
            self._beat(self.seq, "train", cudagraphs="off", engine_restarts=1, rollouts_ok=1)
        stuck = [p for p in (50, 60) if p not in self.killed] if self.phase == "load_wedge" else []
        busy = bool(stuck)
        cpu = {pid: 0.0 if busy else 100.0, **{p: 0.0 for p in stuck}}
        engine = tuple(Heartbeat(p, 1, 0.0, 7, "load", {}) for p in stuck)
        return Sample(t=t, wall=t, cpu_pct=cpu, gpu=(DeviceSample(0, 100.0 if busy else 50.0, 1000.0, (pid,)),),
                      heartbeat=read_heartbeat(self.heartbeat), tree_size=len(cpu), engine=engine)

    def describe(self):
        return [TreeProcess(self.trainer.pid, 0.0, 1, self.trainer.pid, self.trainer.pid, "python", ("python", "t.py"))] + [
            TreeProcess(p, 0.0, self.trainer.pid, p, p, "python", ("python", "-m", "hangwatch.generator.worker"))
            for p in (50, 60) if p not in self.killed]

    def kill_groups(self, pgids, grace, kill_timeout):
        (stuck,) = pgids
        self.killed.add(stuck)
        self.phase = "retried" if stuck == 50 else "done"
        self.started = self.clock()
        return FakeTree.kill_groups(self, pgids, grace, kill_timeout)  # not _EngineTree's: another worker


def _run_supervisor(tmp_path, tree_type):

    def capture(request):
        path = request.run_dir / "incidents" / f"bundle-{request.attempt}-{request.verdict.detected_at}"
        path.mkdir(parents=True)
        return path

    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), interval=1.0, stall_window=10.0, engine_step_timeout=5.0,
                  backoff=1.0, gpu_probe="none", quiet=True)
    config = build(values, ["python", "train.py"])
    config.run_dir.mkdir(parents=True)
    clock = FakeClock()
    sup = Supervisor(config, NoProbe(), capture, tree=tree_type(clock), clock=clock, sleep=clock.sleep, wall=clock)
    assert sup.run() == 0
    return read_journal(sup.run_dir / "journal.jsonl")


def test_the_runner_restarts_both_ranks_workers_wedged_in_the_same_load_at_the_engine_level(tmp_path):
    records = _run_supervisor(tmp_path, _TwoLoadsTree)
    assert [r["level"] for r in records if r["event"] == "recovery"] == [1, 1], \
        "the second stuck worker is the same wedge, not a second one within the retry window"
    assert [r["pids"] for r in records if r["event"] == "engine_restart"] == [[20], [20]]  # the fake kill's report
    assert len([r for r in records if r["event"] == "attempt_started"]) == 1, "no job restart"
    assert all(r["cudagraphs"] == "off" and not r["enforce_eager"] for r in records if r["event"] == "recovery")


def _supervisor(tmp_path: Path, tree, capture, state=None) -> Supervisor:
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), interval=1.0, stall_window=10.0, engine_step_timeout=5.0,
                  backoff=1.0, gpu_probe="none", quiet=True)
    config = build(values, ["python", "train.py"])
    config.run_dir.mkdir(parents=True, exist_ok=True)
    return Supervisor(config, NoProbe(), capture, state=state, tree=tree, clock=tree.clock, sleep=tree.clock.sleep,
                      wall=tree.clock)


def test_a_resume_after_dying_in_the_same_wedges_capture_does_not_add_enforce_eager(tmp_path: Path):
    """Two ranks' workers wedged in the same weight load: the first incident turned graphs off
    (level 1); the second is the same wedge under the old policy and decides nothing. The
    supervisor died capturing the second: the resumed run relaunched with enforce_eager too."""
    def capture(request):
        path = request.run_dir / "incidents" / f"bundle-{request.attempt}-{request.verdict.detected_at}"
        path.mkdir(parents=True)
        return path

    assert _supervisor(tmp_path / "a", _TwoLoadsTree(FakeClock()), capture).run() == 0
    lines = (tmp_path / "a" / "run" / "journal.jsonl").read_text().splitlines(keepends=True)
    events = [json.loads(line)["event"] for line in lines]
    second = [i for i, e in enumerate(events) if e == "incident"][1]
    # SIGKILLed while capturing the second incident: the journal ends with it.
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / "journal.jsonl").write_text("".join(lines[:second + 1]))
    records = read_journal(tmp_path / "run" / "journal.jsonl")
    assert records[-1]["event"] == "incident" and records[-1]["kind"] == "stall"

    tree = _TwoLoadsTree(FakeClock())
    tree.attempt = 1  # the next launch is attempt 2, which trains to the end
    sup = _supervisor(tmp_path, tree, lambda request: None, state=RunState.from_journal(records))
    assert sup.run(resumed=True) == 0
    records = read_journal(tmp_path / "run" / "journal.jsonl")
    started = [r for r in records if r["event"] == "attempt_started"][-1]
    assert started["attempt"] == 2 and started["env"][names.CUDAGRAPHS] == "0"
    assert names.ENFORCE_EAGER not in started["env"], "the same wedge decided no further policy"
