"""Whole attempts through the lifecycle state machine, with fakes and a fake clock.

No process is started and no time passes: the tree, the probe, the capture
hook and the clock are injected, so a 60 s stall window and a restart backoff
run in milliseconds, and every side effect the runner asked for is recorded.
"""

from __future__ import annotations

import signal

import pytest

from hangwatch.contract import env as names
from hangwatch.contract.exitcodes import EXIT_UNKILLABLE
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.journal import Journal, read_journal
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.attempt import AttemptState, GraphPolicy, RunState
from hangwatch.supervisor.runner import Supervisor

from fakes import FakeCapture, FakeClock, FakeProbe, FakeTree, fake_supervisor, runner_config

pytestmark = pytest.mark.timeout(30)


def test_wedge_is_captured_killed_and_relaunched_with_graphs_off(tmp_path):
    sup, tree, clock, capture = fake_supervisor(tmp_path, ["wedge", "train"])
    assert sup.run() == 0
    events = [r["event"] for r in read_journal(sup.run_dir / "journal.jsonl")]
    assert events == ["run_started", "attempt_started", "incident", "capture", "recovery", "kill", "gpu_released",
                      "attempt_ended", "restart_scheduled", "attempt_started", "first_heartbeat", "kill",
                      "gpu_released", "attempt_ended", "run_finished"]
    # The first attempt walked the whole hang path, in order.
    first_env, second_env = tree.launched[0][1], tree.launched[1][1]
    assert first_env[names.CUDAGRAPHS] == "1" and second_env[names.CUDAGRAPHS] == "0"
    assert second_env[names.ATTEMPT] == "2"
    assert len(capture.requests) == 1 and capture.requests[0].verdict.kind is VerdictKind.STALL
    assert sup.state.stalls == 1 and sup.state.policy == GraphPolicy(cudagraphs_off=True)
    assert [s for s in sup.lifecycle.trail] and sup.lifecycle.state is AttemptState.ENDED
    # Detection within the window plus one interval of fake time; every wait was an injected sleep.
    incident = next(r for r in read_journal(sup.run_dir / "journal.jsonl") if r["event"] == "incident")
    assert 10.0 <= incident["latency_s"] <= 11.0
    assert sum(clock.sleeps) >= 3.0


class _StoppedOnce(FakeTree):
    """A trainer that beats every 25 s (healthy under the 30 s progress timeout); the whole job,
    supervisor included, is stopped for 20 min at t=1010 and continued."""

    stopped_for = 0.0  # the trainer's own clock stood still meanwhile

    def sample(self):
        t = self.trainer
        seq = int((self.clock() - self.stopped_for - self.started_at) // 25)
        hb = Heartbeat(t.pid, seq, self.clock(), seq, "train")
        return Sample(t=self.clock(), wall=self.clock(), cpu_pct={t.pid: 100.0},
                      gpu=(DeviceSample(0, 50.0, 1000.0, (t.pid,)),), heartbeat=hb, tree_size=1)


def test_a_job_stopped_and_continued_is_not_a_hang(tmp_path):
    """Before, the first tick after the stop read 20 min without progress: a silent hang, a kill."""
    clock = FakeClock()
    stopped = [False]

    def sleep(seconds):
        clock.sleep(seconds)
        if clock.now >= 1010 and not stopped[0]:
            stopped[0] = True
            clock.now += 1200  # SIGSTOP ... SIGCONT, while we slept
            tree.stopped_for = 1200.0

    tree = _StoppedOnce(clock, ["train"], train_for=1400.0)
    config = runner_config(tmp_path)
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, FakeProbe(), FakeCapture(), tree=tree, clock=clock, sleep=sleep, wall=clock)
    assert sup.run() == 0 and stopped[0]
    assert not [r for r in read_journal(sup.run_dir / "journal.jsonl") if r["event"] == "incident"]


class _StoppedInsideATick(_StoppedOnce):
    """The same job stop, landing inside the supervisor's tick (while it samples), not its sleep:
    no sleep overran, and only the SIGCONT the continued supervisor receives tells of it."""

    supervisor = None

    def sample(self):
        if self.clock() >= 1010 and not self.stopped_for:
            self.clock.now += 1200  # SIGSTOP ... SIGCONT, inside the tick
            self.stopped_for = 1200.0
            self.supervisor.note_continued(signal.SIGCONT)
        return super().sample()


def test_a_job_stopped_inside_a_tick_and_continued_is_not_a_hang(tmp_path):
    """Before, only a stop inside the supervisor's sleep was discounted: this one read as 20 min
    without progress, a silent hang and a kill."""
    clock = FakeClock()
    tree = _StoppedInsideATick(clock, ["train"], train_for=1400.0)
    config = runner_config(tmp_path)
    config.run_dir.mkdir(parents=True)
    sup = tree.supervisor = Supervisor(config, FakeProbe(), FakeCapture(), tree=tree, clock=clock,
                                       sleep=clock.sleep, wall=clock)
    assert sup.run() == 0 and tree.stopped_for
    assert not [r for r in read_journal(sup.run_dir / "journal.jsonl") if r["event"] == "incident"]


def test_second_stall_with_graphs_off_escalates_to_eager(tmp_path):
    sup, tree, _, _ = fake_supervisor(tmp_path, ["wedge", "wedge", "train"])
    assert sup.run() == 0
    envs = [env for _, env in tree.launched]
    assert [e[names.CUDAGRAPHS] for e in envs] == ["1", "0", "0"]
    assert names.ENFORCE_EAGER not in envs[1] and envs[2][names.ENFORCE_EAGER] == "1"


def test_survivors_of_sigkill_stop_the_run_with_exit_74(tmp_path):
    sup, tree, _, _ = fake_supervisor(tmp_path, ["wedge", "train"], survivors=True)
    assert sup.run() == EXIT_UNKILLABLE
    assert len(tree.launched) == 1, "never relaunch into a GPU that survivors may hold"
    last = read_journal(sup.run_dir / "journal.jsonl")[-1]
    assert last["event"] == "run_finished" and last["exit_code"] == EXIT_UNKILLABLE


def test_crash_loop_stops_at_the_budget(tmp_path):
    sup, tree, _, _ = fake_supervisor(tmp_path, ["crash"] * 5, max_restarts=2)
    assert sup.run() == 71
    assert len(tree.launched) == 3
    assert all(env[names.CUDAGRAPHS] == "1" for _, env in tree.launched), "a crash does not change the graph policy"


def test_stop_signal_is_forwarded_to_the_trainer(tmp_path):
    sup, tree, clock, _ = fake_supervisor(tmp_path, ["wedge"], stall_window=1000.0, progress_timeout=2000.0)
    original = tree.sample

    def sample_then_stop():
        if clock.now > 1005:
            sup.request_stop(15)
        return original()

    tree.sample = sample_then_stop
    code = sup.run()
    assert tree.forwarded == [15]
    assert code == 128 + 15
    assert read_journal(sup.run_dir / "journal.jsonl")[-1]["outcome"] == "interrupted"


def test_a_stop_during_an_incident_exits_with_the_stop_signal_not_the_tree_kill(tmp_path):
    """Ctrl-C while the evidence of a hang is taken: the tree is killed as usual and the run
    ends interrupted with 128 + SIGINT (it said 137 or 143, the status of our own kill)."""
    sup, tree, clock, capture = fake_supervisor(tmp_path, ["wedge", "train"])
    original = capture.__call__

    def capture_then_stop(request):
        sup.request_stop(2)
        return original(request)

    sup.capture_hook = capture_then_stop
    assert sup.run() == 128 + 2
    assert len(tree.launched) == 1 and tree.kills >= 1
    assert read_journal(sup.run_dir / "journal.jsonl")[-1]["outcome"] == "interrupted"


def test_a_stop_ends_the_wait_for_gpu_release_at_once(tmp_path):
    """The killed trainer's memory is never freed; a SIGTERM to the supervisor meanwhile was
    ignored for the whole --gpu-release-timeout (60 s)."""
    sup, tree, clock, capture = fake_supervisor(tmp_path, ["wedge", "train"])
    sup.probe = FakeProbe(devices=(DeviceSample(0, 0.0, 30000.0, (4001,)),))  # the memory held
    original = tree.kill

    def kill_then_stop(*args, **kwargs):
        sup.request_stop(15)
        return original(*args, **kwargs)

    tree.kill = kill_then_stop
    assert sup.run() == 128 + 15
    (released,) = [r for r in read_journal(sup.run_dir / "journal.jsonl") if r["event"] == "gpu_released"]
    assert released["released"] is False and released["waited_s"] < 1.0


def test_resume_state_comes_from_the_journal_including_a_pending_restart(tmp_path):
    sup, _, _, _ = fake_supervisor(tmp_path, ["wedge", "train"])
    sup.run()
    state = RunState.from_journal(read_journal(sup.run_dir / "journal.jsonl"))
    assert state.attempt == 2 and state.stalls == 1 and state.policy.cudagraphs_off
    assert [o.kind for o in state.history] == [VerdictKind.STALL, VerdictKind.DONE]
    # A supervisor that died during the backoff after a stall: the decided policy is kept.
    j = Journal(tmp_path / "j.jsonl", "r1")
    j.append("attempt_started", attempt=1, pid=1, env={names.CUDAGRAPHS: "1"})
    j.append("incident", attempt=1, kind="stall")
    j.append("attempt_ended", attempt=1, kind="stall")
    j.append("restart_scheduled", after_attempt=1, cudagraphs="off", enforce_eager=False)
    assert RunState.from_journal(read_journal(tmp_path / "j.jsonl")).policy == GraphPolicy(cudagraphs_off=True)


@pytest.mark.parametrize("records, policy", [
    # A level-1 engine restart switched the live trainer to graphs off; the supervisor died after.
    ([("recovery", {"level": 1, "cudagraphs": "off", "enforce_eager": False}),
      ("engine_restart", {"ok": True, "cudagraphs": "off", "enforce_eager": False})], GraphPolicy(True)),
    # A stall's job restart was decided (recovery) but the supervisor died before restart_scheduled.
    ([("recovery", {"level": 2, "cudagraphs": "off", "enforce_eager": False})], GraphPolicy(True)),
    # A failed engine restart decides nothing of its own; the recovery before it still holds.
    ([("recovery", {"level": 1, "cudagraphs": "off", "enforce_eager": True}),
      ("engine_restart", {"ok": False, "escalated_to": "job"})], GraphPolicy(True, True)),
])
def test_resume_keeps_the_policy_an_incident_decided_after_the_attempt_started(tmp_path, records, policy):
    """A --resume after a level-1 incident relaunched with graphs on and wedged again."""
    j = Journal(tmp_path / "j.jsonl", "r1")
    j.append("attempt_started", attempt=1, pid=1, env={names.CUDAGRAPHS: "1"})
    j.append("incident", attempt=1, kind="stall")
    for event, fields in records:
        j.append(event, attempt=1, **fields)
    assert RunState.from_journal(read_journal(tmp_path / "j.jsonl")).policy == policy
    j.append("attempt_started", attempt=2, pid=2, env={names.CUDAGRAPHS: "1"})
    assert RunState.from_journal(read_journal(tmp_path / "j.jsonl")).policy == GraphPolicy(), \
        "a later attempt's own start environment holds again"


def test_the_engine_retry_window_counts_across_a_resume(tmp_path):
    """A level-1 engine restart, then the supervisor died and was resumed: a wedge right after the
    resume is a second one within --engine-retry-window (a job restart), not a first one retried
    at the engine level again. The window starts from the journal's wall time of that restart."""
    j = Journal(tmp_path / "j.jsonl", "r1")
    j.append("attempt_started", attempt=1, pid=1, env={names.CUDAGRAPHS: "1"})
    j.append("engine_restart", attempt=1, ok=True, cudagraphs="off", enforce_eager=False)
    j.append("engine_restart", attempt=1, ok=False, escalated_to="job")  # a failed one starts no window
    state = RunState.from_journal(read_journal(tmp_path / "j.jsonl"))
    restarted_at = state.last_engine_restart_wall
    assert restarted_at is not None
    clock = FakeClock()
    config = runner_config(tmp_path)
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, FakeProbe(), FakeCapture(), state=state, tree=FakeTree(clock, ["train"]),
                     clock=clock, sleep=clock.sleep, wall=lambda: restarted_at + 120.0)
    assert sup.engine_level.last_restart == pytest.approx(clock() - 120.0)
    fresh = RunState.from_journal(read_journal(tmp_path / "j.jsonl")[:1])
    assert fresh.last_engine_restart_wall is None
    skewed = Supervisor(config, FakeProbe(), FakeCapture(), state=state, tree=FakeTree(clock, ["train"]),
                        clock=clock, sleep=clock.sleep, wall=lambda: restarted_at - 3 * 86400.0)
    assert skewed.engine_level.last_restart is None, "a restart 'in the future' (a clock set back) opens no window"


@pytest.mark.parametrize("kind, graphs_off", [("stall", True), ("silent_hang", False)])
def test_a_resume_after_a_supervisor_that_died_between_a_stall_and_its_recovery_turns_graphs_off(
        tmp_path, kind, graphs_off):
    """The supervisor was SIGKILLed during the stall's capture (after ``incident``, before
    ``recovery``): the resumed run relaunched with graphs on, and the wedge came back."""
    j = Journal(tmp_path / "j.jsonl", "r1")
    j.append("attempt_started", attempt=1, pid=1, env={names.CUDAGRAPHS: "1"})
    j.append("incident", attempt=1, kind=kind)
    state = RunState.from_journal(read_journal(tmp_path / "j.jsonl"))
    clock = FakeClock()
    config = runner_config(tmp_path)
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, FakeProbe(), FakeCapture(), state=state, tree=FakeTree(clock, ["train"]),
                     clock=clock, sleep=clock.sleep, wall=clock)
    assert sup.run(resumed=True) == 0
    records = read_journal(config.run_dir / "journal.jsonl")
    (started,) = [r for r in records if r["event"] == "attempt_started"]
    assert started["env"][names.CUDAGRAPHS] == ("0" if graphs_off else "1")
    (resumed,) = [r for r in records if r["event"] == "run_resumed"]
    assert resumed.get("unanswered_stall", False) is graphs_off


@pytest.mark.parametrize("kind, counted", [("stopped", False), ("done", False), ("stall", True)])
def test_an_attempt_the_runs_stop_ended_spends_no_restart_after_a_resume(tmp_path, kind, counted):
    """A preempted (SIGTERM) run, resumed: the stopped attempt is no verdict on the trainer, so the
    restart policy does not count it; a hang caught before the stop came stays one."""
    j = Journal(tmp_path / "j.jsonl", "r1")
    j.append("attempt_started", attempt=1, pid=1, env={names.CUDAGRAPHS: "1"})
    j.append("attempt_ended", attempt=1, kind=kind)
    j.append("run_finished", outcome="interrupted", exit_code=143)
    state = RunState.from_journal(read_journal(tmp_path / "j.jsonl"))
    assert state.attempt == 1 and [o.attempt for o in state.history] == ([1] if counted else [])


def test_a_trainer_that_outlives_the_stops_grace_is_said_to_be_killed_not_killed_by_the_signal(tmp_path):
    """SIGINT forwarded, the trainer ignores it past --grace, the tree is killed: the attempt's end
    said 'trainer killed by SIGINT' beside an exit status of our SIGTERM (-15)."""
    sup, tree, clock, _ = fake_supervisor(tmp_path, ["wedge"])
    original = tree.sample

    def sample_then_stop():
        if clock.now > 1003:
            sup.request_stop(signal.SIGINT)
        return original()

    tree.sample = sample_then_stop
    assert sup.run() == 128 + signal.SIGTERM, "the trainer's own status: it died of our kill"
    (ended,) = [r for r in read_journal(sup.run_dir / "journal.jsonl") if r["event"] == "attempt_ended"]
    assert ended["kind"] == "stopped" and "did not exit within --grace" in ended["reason"], ended
    assert "killed by SIGINT" not in ended["reason"]


def test_checkpoints_that_cannot_be_listed_stop_the_run_instead_of_a_restart_from_scratch(tmp_path):
    """The checkpoint directory became unreadable between attempts (here a link loop; permissions,
    a stale NFS handle): before, it read as "no checkpoints" and the trainer was relaunched from
    scratch, to save over them. Now the run stops with 76 and says what to fix."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "checkpoint-5").mkdir(parents=True)
    (ckpt / "checkpoint-5" / "trainer_state.json").write_text("{}")
    sup, tree, clock, _ = fake_supervisor(tmp_path, ["wedge", "train"], checkpoint_dir=str(ckpt))

    real_sleep = clock.sleep

    def sleep(seconds):  # in the backoff after the wedge, the directory goes bad
        real_sleep(seconds)
        if len(tree.launched) == 1 and ckpt.is_dir() and not ckpt.is_symlink():
            ckpt.rename(tmp_path / "ckpt-moved")
            ckpt.symlink_to(ckpt)  # a loop: listing it fails with ELOOP, even for root

    sup.sleep = sleep
    assert sup.run() == 76
    assert len(tree.launched) == 1, "never relaunched from scratch"
    last = read_journal(sup.run_dir / "journal.jsonl")[-1]
    assert last["event"] == "run_finished" and last["exit_code"] == 76
    assert "cannot list the checkpoint directory" in last["reason"] and "not relaunching from scratch" in last["reason"]


def test_a_trainer_that_exits_between_two_ticks_is_seen_at_once_not_at_the_next_tick(tmp_path):
    """With a long interval the run still ends within 50 ms of the trainer's exit: the wait
    between ticks watches the trainer (before: up to a whole interval later)."""
    sup, tree, clock, _ = fake_supervisor(tmp_path, ["train"], interval=20.0, stall_window=100.0, progress_timeout=300.0)
    tree.train_for = 5.0
    assert sup.run() == 0
    ended = next(r for r in read_journal(tmp_path / "run" / "journal.jsonl") if r["event"] == "attempt_ended")
    assert ended["kind"] == "done" and ended["duration_s"] <= 5.0 + 0.1



class _QuietAfter(FakeTree):
    """Attempt 1 beats every second for 20 s, then goes silent without exiting (a busy hang)."""

    def sample(self):
        sample = super().sample()
        if len(self.launched) == 1 and self.clock() - self.started_at > 20.0:
            return Sample(t=sample.t, wall=sample.wall, cpu_pct=sample.cpu_pct, gpu=sample.gpu, tree_size=1)
        return sample


def test_a_learned_progress_timeout_is_journaled_once_and_carried_to_the_next_attempt_and_a_resume(tmp_path):
    """--progress-timeout auto: attempt 1 beats every second for 20 s and learns its timeout (the
    floor, 120 s: p99 1 s x 3 is less), which then judges its silence; attempt 2 starts with it in
    force and journals nothing new; a --resume reads it back from the journal."""
    clock = FakeClock()
    tree = _QuietAfter(clock, ["hang", "train"])
    config = runner_config(tmp_path, progress_timeout_auto=True, auto_warmup_beats=5)
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, FakeProbe(), FakeCapture(), tree=tree, clock=clock, sleep=clock.sleep, wall=clock)
    assert sup.run() == 0
    journal = read_journal(sup.run_dir / "journal.jsonl")
    learned = [r for r in journal if r["event"] == "timeout_learned"]
    assert len(learned) == 1, learned
    record = learned[0]
    assert record["attempt"] == 1 and record["rule"] == "progress" and record["timeout_s"] == 120.0
    assert record["intervals"] == 5 and record["quantile_s"] == pytest.approx(1.0, abs=0.01)
    assert record["warmup_beats"] == 5 and record["factor"] == 3.0
    incident = next(r for r in journal if r["event"] == "incident")
    assert incident["window"] == 120.0 and incident["evidence"]["learned_timeout_s"] == 120.0
    assert [r["attempt"] for r in journal if r["event"] == "attempt_started"] == [1, 2]
    assert sup._detector_config().learned_progress.timeout == 120.0
    state = RunState.from_journal(journal)
    assert state.learned_timeout["timeout_s"] == 120.0
    resumed = Supervisor(sup.config, FakeProbe(), FakeCapture(), state=state, tree=FakeTree(clock, ["train"]),
                         clock=clock, sleep=clock.sleep, wall=clock)
    assert resumed._detector_config().learned_progress.timeout == 120.0
    fixed = Supervisor(runner_config(tmp_path / "other"), FakeProbe(), FakeCapture(), state=state,
                       tree=FakeTree(clock, ["train"]), clock=clock, sleep=clock.sleep, wall=clock)
    assert fixed._detector_config().learned_progress is None, "a fixed timeout is fixed, whatever was learned"


class _BeatsThenSpins(FakeTree):
    """Beats (each written 0.5 s before the tick reads it) for 3 s, then spins without a beat:
    a busy hang, no GPU sample, so only the progress rule can fire."""

    def sample(self):
        t = self.trainer
        self.seq += 1
        now = self.clock()
        hb = Heartbeat(t.pid, self.seq, now - 0.5, self.seq, "train") if now - self.started_at <= 3.0 else None
        return Sample(t=now, wall=now, cpu_pct={t.pid: 100.0}, gpu=None, heartbeat=hb, tree_size=1)


def test_a_progress_timeout_ending_between_ticks_is_judged_when_it_ends_not_a_tick_later(tmp_path):
    clock = FakeClock()
    tree = _BeatsThenSpins(clock, ["hang"], default="train")
    capture = FakeCapture()
    config = runner_config(tmp_path, max_restarts=1)
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, FakeProbe(), capture, tree=tree, clock=clock, sleep=clock.sleep, wall=clock)
    sup.run()
    verdict = capture.requests[0].verdict
    last_beat = verdict.evidence["last_progress_t"]  # the last beat's own time, half a tick before a tick
    # The 30 s timeout from it ends half-way between two ticks: judged then, not at the next tick.
    assert verdict.kind is VerdictKind.SILENT_HANG and (last_beat - 1000.0) % 1.0 == 0.5
    assert last_beat + 30.0 - 0.1 <= verdict.detected_at < last_beat + 30.0 + 0.1
