"""Observe-only mode (``--on-hang observe``): the decision, with fakes and a fake clock.

One incident per stall episode, what would have been done journaled, nothing killed, the graph
policy kept, and the trainer's own recovery noticed. (The same with real processes, a real
alert receiver and a real bundle: tests/e2e/test_observe_only_run.py.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from hangwatch.contract import env as names
from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.journal import fold_journal, read_journal
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.config import SETTINGS, ConfigError, build
from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.decide.observe_only import StallEpisode
from hangwatch.supervisor.runner import Supervisor

from fakes import FakeClock, FakeProbe, FakeTrainer

pytestmark = pytest.mark.timeout(30)


def _beat(pid: int, seq: int, step: int | None) -> Heartbeat:
    return Heartbeat(pid, seq, 0.0, step, "train")


def _sample(t: float, hb: Heartbeat | None = None, engine: tuple[Heartbeat, ...] = ()) -> Sample:
    return Sample(t=t, wall=t, cpu_pct={1: 0.0}, gpu=None, heartbeat=hb, engine=engine)


# -- the episode, on its own ---------------------------------------------------------------


def test_the_same_beat_again_is_no_recovery():
    episode = StallEpisode(1, 100.0, _beat(1, 7, 7), {})
    assert episode.observe(_sample(130.0, _beat(1, 7, 7))) is None
    assert episode.observe(_sample(131.0, None)) is None


def test_a_new_beat_at_the_same_step_is_no_recovery_but_a_newer_step_is():
    """The step rule fires on beats that keep coming at one step: only a newer step is progress."""
    episode = StallEpisode(1, 100.0, _beat(1, 7, 7), {})
    assert episode.observe(_sample(120.0, _beat(1, 8, 7))) is None
    recovered = episode.observe(_sample(142.5, _beat(1, 9, 8)))
    assert recovered is not None and recovered.after_s == pytest.approx(42.5) and recovered.step == 8
    assert recovered.how == "trainer"


def test_beats_without_steps_recover_on_any_new_beat_and_a_trainer_that_never_beat_on_its_first():
    assert StallEpisode(1, 0.0, _beat(1, 3, None), {}).observe(_sample(5.0, _beat(1, 4, None))) is not None
    assert StallEpisode(1, 0.0, None, {}).observe(_sample(5.0, _beat(1, 1, 0))) is not None


def test_the_stuck_engine_stepping_again_ends_an_engine_verdict():
    stuck = Heartbeat(50, 3, 0.0, 3, "engine")
    episode = StallEpisode(1, 10.0, _beat(1, 7, 7), {"engine_pid": 50}, (stuck,))
    assert episode.observe(_sample(20.0, _beat(1, 7, 7), (stuck,))) is None
    assert episode.observe(_sample(20.0, _beat(1, 7, 7), (Heartbeat(51, 9, 0.0, 9, "engine"),))) is None
    recovered = episode.observe(_sample(25.0, _beat(1, 7, 7), (Heartbeat(50, 4, 0.0, 4, "engine"),)))
    assert recovered is not None and recovered.how == "engine" and recovered.after_s == 15.0


# -- whole attempts, fake clock ------------------------------------------------------------------


@dataclass
class ScriptedTree:
    """Unlike the shared ``FakeTree`` (one behaviour per attempt), a wedge here is a window of time
    inside one attempt, so that the same trainer can hang and then move on by itself.

    One trainer that beats a step a second, except while wedged (GPU busy, CPU idle, no beat);
    ``wedges``: (from, to) seconds after launch; it exits 0 at ``exit_at``."""

    clock: FakeClock
    wedges: list[tuple[float, float]]
    exit_at: float
    signals: list[str] = field(default_factory=list)  # every kill or forward asked of the tree
    trainer: FakeTrainer | None = None
    started: float = 0.0
    step: int = 0
    seq: int = 0

    def launch(self, argv, env, attempt_dir):
        self.env = dict(env)
        self.started = self.clock()
        self.trainer = FakeTrainer(4242, 77.0, attempt_dir / "stdout.log", attempt_dir / "stderr.log")
        return self.trainer

    def _wedged(self) -> bool:
        age = self.clock() - self.started
        return any(a <= age < b for a, b in self.wedges)

    def exit_code(self, trainer):
        return 0 if self.clock() - self.started >= self.exit_at else None

    def watch(self, heartbeat):
        pass

    def sample(self):
        wedged = self._wedged()
        if not wedged:
            self.seq += 1
            self.step += 1
        hb = Heartbeat(4242, self.seq, self.clock(), self.step, "train") if self.seq else None
        return Sample(t=self.clock(), wall=self.clock(), cpu_pct={4242: 0.0 if wedged else 100.0},
                      gpu=(DeviceSample(0, 100.0 if wedged else 50.0, 1000.0, (4242,)),), heartbeat=hb, tree_size=1)

    def describe(self):
        return [TreeProcess(4242, 77.0, 1, 4242, 4242, "python", ("python", "train.py", "--api-key", "s3cret"))]

    def forward(self, sig, trainer):
        self.signals.append(f"forward {sig}")

    def kill(self, grace, kill_timeout, launcher=None):
        self.signals.append(f"kill at {self.clock() - self.started:.0f} s")
        return None  # nothing left: the trainer exited by itself

    def kill_groups(self, pgids, grace, kill_timeout):
        self.signals.append(f"kill_groups {sorted(pgids)}")
        return None


def _run(tmp_path, tree: ScriptedTree, **over):
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), interval=1.0, stall_window=10.0, progress_timeout=30.0,
                  gpu_probe="none", quiet=True, on_hang="observe")
    values.update(over)
    config = build(values, ["python", "train.py"])
    config.run_dir.mkdir(parents=True)
    bundles = []

    def capture(request):
        path = request.run_dir / "incidents" / f"bundle-{len(bundles)}"
        path.mkdir(parents=True)
        bundles.append(request)
        return path

    sup = Supervisor(config, FakeProbe(), capture, tree=tree, clock=tree.clock, sleep=tree.clock.sleep,
                     wall=tree.clock)
    code = sup.run()
    return code, sup, read_journal(sup.run_dir / "journal.jsonl"), bundles


def test_a_hang_that_lasts_is_one_incident_nothing_killed_and_the_policy_kept(tmp_path):
    """Wedged from 5 s to its exit at 110 s under a 10 s window: one incident (not ten), what would have been done, no kill,
    no restart, graphs still on; the trainer's own exit ends the attempt and the run."""
    tree = ScriptedTree(FakeClock(), wedges=[(5.0, 200.0)], exit_at=110.0)
    code, sup, journal, bundles = _run(tmp_path, tree)
    assert code == 0
    events = [r["event"] for r in journal]
    assert events.count("incident") == 1 and len(bundles) == 1
    assert "recovery" not in events and "restart_scheduled" not in events and "engine_restart" not in events
    would = next(r for r in journal if r["event"] == "would_act")
    assert would["level"] == 2 and would["scope"] == "job" and would["cudagraphs"] == "off"
    assert would["would_kill"] == [{"pid": 4242, "create_time": 77.0,
                                    "cmdline": ["python", "train.py", "--api-key", "[REDACTED]"]}]
    assert would["policy_now"] == {"cudagraphs": "on", "enforce_eager": False}
    assert events.index("incident") < events.index("capture") < events.index("would_act")
    assert next(r for r in journal if r["event"] == "incident")["observe_only"] is True
    # Never a signal during the hang; the only kill is the usual sweep after the trainer's own exit.
    assert tree.signals == ["kill at 110 s"]
    assert sup.state.policy == GraphPolicy() and tree.env[names.CUDAGRAPHS] == "1"
    assert "recovered_by_itself" not in events
    assert [r["kind"] for r in journal if r["event"] == "attempt_ended"] == ["done"]
    run = fold_journal(journal)
    assert run.unanswered_stall is False, "a --resume must not decide the policy observe-only never decided"
    assert run.incidents[0]["would_act"]["scope"] == "job"


def test_a_trainer_that_moves_on_by_itself_is_journaled_and_a_second_hang_is_a_second_incident(tmp_path):
    tree = ScriptedTree(FakeClock(), wedges=[(5.0, 40.0), (60.0, 90.0)], exit_at=100.0)
    code, sup, journal, bundles = _run(tmp_path, tree)
    assert code == 0
    events = [r["event"] for r in journal]
    assert events.count("incident") == 2 and events.count("would_act") == 2 and len(bundles) == 2
    recovered = [r for r in journal if r["event"] == "recovered_by_itself"]
    assert len(recovered) == 2
    # Detected ~10 s into the 35 s wedge: it moved on ~25 s after the verdict, at a newer step.
    assert 23.0 <= recovered[0]["after_s"] <= 27.0 and recovered[0]["how"] == "trainer"
    assert events.index("would_act") < events.index("recovered_by_itself") < len(events) - 1 - events[::-1].index(
        "incident")
    assert tree.signals == ["kill at 100 s"]
    assert fold_journal(journal).recovered_by_itself == 2
    assert len([r for r in journal if r["event"] == "attempt_started"]) == 1


def test_act_stays_the_default_and_on_hang_takes_only_act_or_observe(tmp_path):
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"))
    assert build(values, ["python", "t.py"]).on_hang == "act"
    with pytest.raises(ConfigError, match="--on-hang must be act or observe"):
        build({**values, "on_hang": "watch"}, ["python", "t.py"])
