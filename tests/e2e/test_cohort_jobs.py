"""Real multi-node jobs on one machine: N `hangwatch run --cohort` supervisors, each wrapping
`torchrun --rdzv-backend c10d` with a CPU rank on gloo, a shared checkpoint dir and a
simulated GPU file per node; and a job stopped by a lost node, resumed on every node (real
supervisors, each with its real store helper, around a small trainer).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hangwatch.contract.exitcodes import EXIT_COHORT
from hangwatch.contract.journal import read_journal

from cohort_job import HANGWATCH, Job, _free_port, _wait_training, stranger_attacks

pytestmark = [pytest.mark.slow]


@pytest.fixture
def job_factory(tmp_path):
    jobs = []

    def make(*args, **kw):
        jobs.append(Job(tmp_path, *args, **kw))
        return jobs[-1]

    yield make
    for j in jobs:
        j.cleanup()


@pytest.mark.timeout(240)
def test_a_wedged_rank_on_node_1_is_one_incident_and_every_node_resumes_together(job_factory):
    job = job_factory(2, wedge_node=1, wedge_step=5)
    codes = job.wait(200)
    assert codes == [0, 0], [job.output(i) for i in range(2)]
    assert (job.ckpt / "finished-attempt-2").exists(), "training finished on the second attempt, on all ranks"
    assert not job.leftovers()
    # Every node kept its ranks' stacks until all had captured: across both nodes' bundles, the
    # rank in the replay function is the suspect among the ranks waiting in all_reduce.
    bundles = [str(b) for i in range(2) for b in (job.tmp / f"run{i}" / "incidents").iterdir()]
    replay = json.loads(subprocess.run([HANGWATCH, "replay", "--json", *bundles], capture_output=True, text=True,
                                       timeout=60).stdout)
    seen = [(p["pid"], p.get("rank"), p.get("state"), p.get("signature_id"), p["top_frames"][:2]) for p in replay["processes"]]
    assert replay["suspect"] is not None and replay["suspect"]["source"].endswith("-node1"), (replay["suspect"], seen)
    suspect = next(p for p in replay["processes"] if p["pid"] == replay["suspect"]["pid"])
    assert suspect["top_frames"][0].startswith("replay ")
    assert any(p["signature_id"] == "nccl-collective-wait" for p in replay["processes"])
    for i in range(2):
        records = job.journal(i)
        incidents = [r for r in records if r["event"] == "cohort_incident"]
        assert len(incidents) == 1 and incidents[0]["suspect_node"] == 1
        assert incidents[0]["this_node_first"] is (i == 1)
        assert incidents[0]["suspect_evidence"], "the suspect's own numbers travel with the announcement"
        kills = [r for r in records if r["event"] == "kill"]
        assert kills and kills[0]["confirmed"] and kills[0]["attempt"] == 1
        agreed = next(r for r in records if r["event"] == "cohort_agreed")
        assert agreed["checkpoint_step"] == 4 and agreed["cudagraphs"] == "off"
        second = [r for r in records if r["event"] == "attempt_started"][1]
        assert second["env"]["HANGWATCH_CUDAGRAPHS"] == "0"
        assert second["env"]["HANGWATCH_ATTEMPT"] == "2"
        assert second["resume_from"] == str(job.ckpt / "checkpoint-4")
        bundle = next(r["evidence_path"] for r in records if r["event"] == "capture")
        assert bundle and Path(bundle).is_dir(), "every node captured its evidence"
        assert bundle.endswith(f"-node{i}"), "bundle names say which node they come from"
        assert records[-1]["event"] == "run_finished" and records[-1]["outcome"] == "success"
        status = json.loads(subprocess.run([HANGWATCH, "status", "--json", str(job.tmp / f"run{i}")],
                                           capture_output=True, text=True, timeout=30).stdout)
        assert status["cohort"]["node_rank"] == i and status["cohort"]["nnodes"] == 2
        assert [e["event"] for e in status["cohort"]["events"]] == ["cohort_incident", "cohort_agreed", "cohort_culprit"]
        # Node 0 dumped only ranks waiting in the collective; still, its record names node 1's rank,
        # as node 1's does: the nodes' process rows travel with their agreement reports.
        culprit = next(r for r in records if r["event"] == "cohort_culprit")
        # (c10d's rendezvous gives ranks in arrival order, not by node: the rank is the one torchrun gave)
        assert culprit["node"] == 1 and culprit["rank"] in (0, 1), culprit
        assert (culprit["pid"], culprit["rank"]) == (replay["suspect"]["pid"], replay["suspect"]["rank"])
        assert "wait in a collective" in culprit["reason"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("lost", "cause"), [
    (1, "node 1 unreachable: its supervisor stopped renewing, or the network between us failed"),
    (0, "node 0 unreachable: its supervisor stopped answering, or the network between us failed")])
def test_a_lost_node_stops_the_others_within_the_lease(job_factory, lost, cause):
    """Node 1 lost: its lease stops. Node 0 lost: the store it hosts is gone. Either way the
    survivor captures, kills its tree and exits 75; no process of the job survives anywhere."""
    job = job_factory(2, steps=400, lease=5.0)
    _wait_training(job, 1 - lost)
    os.kill(job.procs[lost].pid, signal.SIGKILL)  # that supervisor's tree dies with it: pdeathsig, guardian
    killed_at = time.monotonic()
    survivor = 1 - lost
    code = job.procs[survivor].wait(timeout=90)
    took = time.monotonic() - killed_at
    assert code == 75, job.output(survivor)
    records = job.journal(survivor)
    member_lost = next(r for r in records if r["event"] == "member_lost")
    assert cause in member_lost["reason"]
    assert records[-1]["event"] == "run_finished" and records[-1]["exit_code"] == 75
    assert took < 5.0 + 60, "noticed within the lease, then captured and killed (bounded)"
    time.sleep(2)
    assert not job.leftovers(), [p.info for p in job.leftovers()]


@pytest.mark.timeout(240)
def test_a_crash_on_one_node_restarts_every_node_together(job_factory):
    job = job_factory(2, crash_node=1, wedge_step=5)
    codes = job.wait(200)
    assert codes == [0, 0], [job.output(i) for i in range(2)]
    for i in range(2):
        records = job.journal(i)
        starts = [r for r in records if r["event"] == "attempt_started"]
        assert len(starts) == 2 and starts[1]["env"]["HANGWATCH_ATTEMPT"] == "2"
        assert len([r for r in records if r["event"] == "cohort_agreed"]) == 1
        assert starts[1]["env"]["HANGWATCH_CUDAGRAPHS"] == "1", "a crash does not turn graphs off"
    assert not job.leftovers()


@pytest.mark.timeout(120)
def test_a_node_with_other_settings_is_refused(job_factory, tmp_path):
    job = job_factory(2, steps=400, extra={1: ["--cudagraphs-after-stall", "keep", "--capture-timeout", "60"]})
    code1 = job.procs[1].wait(timeout=90)
    out = job.output(1)
    assert code1 == 2 and "cudagraphs_after_stall: node 0 has 'off', this node 'keep'" in out, out
    # A shorter capture wait on one node killed its ranks, and woke the others', mid-capture.
    assert "capture_timeout: node 0 has 15.0, this node 60.0" in out, out
    job.cleanup()


@pytest.mark.timeout(120)
def test_a_node_still_working_after_the_others_finished_is_left_alone(job_factory):
    """Node 1's command goes on after torchrun (a final upload) while node 0's has finished:
    node 0 keeps the store up until node 1 is done, and neither node takes the other's
    silence for a loss (before: node 1 was killed and exited 75, the store gone)."""
    job = job_factory(2, steps=4, lease=2.0, after={1: 4})
    codes = job.wait(90)
    assert codes == [0, 0], [job.output(i) for i in range(2)]
    for i in range(2):
        records = job.journal(i)
        assert not [r for r in records if r["event"] in ("member_lost", "incident")], records
        assert records[-1]["event"] == "run_finished" and records[-1]["outcome"] == "success"
    assert not job.leftovers()


@pytest.mark.timeout(120)
def test_a_stop_on_one_node_stops_every_node_and_the_journals_say_why(job_factory):
    """SIGTERM to node 1's supervisor: node 0 stops too, at once and the same way, and its
    journal names node 1's signal (before: node 1's stop was announced as a crash, node 0
    captured a fake incident and gave up with 75 on a 'lost' member)."""
    job = job_factory(2, steps=400, lease=4.0)
    _wait_training(job, 0), _wait_training(job, 1)
    os.kill(job.procs[1].pid, signal.SIGTERM)
    codes = job.wait(60)
    # 128 + SIGTERM on both: torchrun's own answer to the forwarded SIGTERM (1 or 143) is not the job's.
    assert codes == [143, 143], [job.output(i) for i in range(2)]
    records = job.journal(0)
    stop = next(r for r in records if r["event"] == "member_lost")
    assert stop["cause"] == "stopped" and "node 1's supervisor received SIGTERM" in stop["reason"]
    assert not [r for r in records if r["event"] in ("incident", "cohort_incident")], "a stop is not an incident"
    assert records[-1]["event"] == "run_finished" and records[-1]["outcome"] == "interrupted"
    time.sleep(1)
    assert not job.leftovers()


@pytest.mark.timeout(60)
def test_a_node_that_never_shows_up_ends_the_wait_with_what_is_missing(tmp_path):
    """--join-timeout bounds the start: node 0 alone says which node is missing, a node
    without node 0 says where it looked for the store and what to check."""
    procs = []
    started = time.monotonic()
    for rank in (0, 1):  # two separate cohorts: each node waits alone
        argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(tmp_path / f"run{rank}"), "--cohort",
                f"127.0.0.1:{_free_port()}", "--node-rank", str(rank), "--nnodes", "2", "--join-timeout", "2", "--",
                sys.executable, "-c", "pass"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    runs = []
    for p in procs:
        _, err = p.communicate(timeout=50)
        runs.append((p.returncode, err, time.monotonic() - started))
    (code0, err0, took0), (code1, err1, took1) = runs
    assert code0 == 2 and "nodes [1] did not join within 2 s" in err0, err0
    assert code1 == 2 and "is hangwatch run started on node 0 with the same --cohort" in err1, err1
    assert took0 < 30 and took1 < 30, "bounded by --join-timeout (plus start-up), not the 120 s default"


@pytest.mark.timeout(90)
def test_a_cohort_node_resumed_alone_is_refused_not_run_as_a_single_node(tmp_path):
    """`hangwatch run --resume RUN_DIR` takes the saved settings, which do not hold the cohort
    options: a node whose supervisor was SIGKILLed and resumed that way ran alone as a
    single-node run (its launcher waiting for a rendezvous the others had left) instead of
    being refused as documented."""
    port = _free_port()
    procs = [subprocess.Popen([HANGWATCH, "run", "--quiet", "--run-dir", str(tmp_path / f"run{rank}"), "--cohort",
                               f"127.0.0.1:{port}", "--node-rank", str(rank), "--nnodes", "2", "--lease-timeout", "2",
                               "--", "sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True) for rank in (0, 1)]
    try:
        journal = tmp_path / "run1" / "journal.jsonl"
        deadline = time.monotonic() + 40
        while not (journal.exists() and "attempt_started" in journal.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait(timeout=10)
        resumed = subprocess.run([HANGWATCH, "run", "--quiet", "--resume", str(tmp_path / "run1")],
                                 capture_output=True, text=True, timeout=60)
        assert resumed.returncode == 2, resumed.stderr
        assert "--resume is not supported for a multi-node cohort (this run was node 1 of 2)" in resumed.stderr
        assert journal.read_text().count('"attempt_started"') == 1, "nothing was launched"
        assert procs[0].wait(timeout=40) == 75, "node 0 lost node 1 (the job is restarted as a whole)"
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


# Attempt 1 saves checkpoint-2 and trains on; an attempt given a checkpoint finishes.
_TRAINER = """
import os, pathlib, sys, time
ckpt = pathlib.Path(sys.argv[1])
if os.environ.get("HANGWATCH_RESUME_FROM"):
    sys.exit(0)
if os.environ["NODE"] == "0":
    (ckpt / "checkpoint-2").mkdir(parents=True, exist_ok=True)
    (ckpt / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
time.sleep(120)
"""


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_job_stopped_by_a_lost_node_is_resumed_on_every_node_from_its_checkpoint(tmp_path):
    """Node 1's supervisor SIGKILLed: node 0 stops with 75 as documented, "restart the job". Its
    run was refused by --resume ("already finished") and node 1's ("not supported for a
    multi-node cohort"), so the job could only start over as a new run, from step 0. Resumed on
    both nodes with their cohort options, both go on as attempt 2 from checkpoint-2 and finish."""
    ckpt = tmp_path / "ckpt"
    port = _free_port()

    def cohort(rank):
        return ["--cohort", f"127.0.0.1:{port}", "--node-rank", str(rank), "--nnodes", "2", "--lease-timeout", "3"]

    def start(rank, argv):
        env = dict(os.environ, NODE=str(rank))
        env.pop("HANGWATCH_CONFIG", None)
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    procs = [start(rank, [HANGWATCH, "run", "--quiet", "--run-dir", str(tmp_path / f"run{rank}"), "--gpu-probe", "none",
                          "--checkpoint-dir", str(ckpt), *cohort(rank), "--", sys.executable, "-c", _TRAINER,
                          str(ckpt)]) for rank in (0, 1)]
    try:
        journal1 = tmp_path / "run1" / "journal.jsonl"
        _wait_for(lambda: (ckpt / "checkpoint-2" / "trainer_state.json").exists() and journal1.exists()
                  and "attempt_started" in journal1.read_text(), 60, "both nodes training")
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait(timeout=10)
        assert procs[0].wait(timeout=60) == EXIT_COHORT, procs[0].stderr.read()
        swapped = subprocess.run([HANGWATCH, "run", "--quiet", "--resume", str(tmp_path / "run0"), *cohort(1)],
                                 capture_output=True, text=True, timeout=60)
        assert swapped.returncode == 2 and "this run was node 0 of 2" in swapped.stderr, swapped.stderr
        procs = [start(rank, [HANGWATCH, "run", "--quiet", "--resume", str(tmp_path / f"run{rank}"), *cohort(rank)])
                 for rank in (0, 1)]
        outs = [p.communicate(timeout=90) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
        for rank in (0, 1):
            records = read_journal(tmp_path / f"run{rank}" / "journal.jsonl")
            starts = [r for r in records if r["event"] == "attempt_started"]
            assert [s["attempt"] for s in starts] == [1, 2]
            assert starts[1]["resume_from"] == str(ckpt / "checkpoint-2")
            agreed = next(r for r in records if r["event"] == "cohort_agreed")
            assert agreed["resumed"] and agreed["checkpoint_step"] == 2
            assert records[-1]["event"] == "run_finished" and records[-1]["outcome"] == "success"
        status = json.loads(subprocess.run([HANGWATCH, "status", "--json", str(tmp_path / "run0")],
                                           capture_output=True, text=True, timeout=30).stdout)
        assert status["finished"]["exit_code"] == 0
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def _stranger_writes(job: Job, values: dict[str, bytes]) -> None:
    """Someone who reached the store's port: reads the run's generation as anyone can, writes ``values``
    under the run's keys (``incident/1``, ``stop``...)."""
    import datetime

    from torch.distributed import TCPStore

    joined = next(r for r in job.journal(0) if r["event"] == "cohort_joined")
    host, _, port = joined["store"].rpartition(":")
    stranger = TCPStore(host, int(port), None, False, datetime.timedelta(seconds=10), wait_for_workers=False)
    leader = stranger.get(f"hangwatch/{joined['cohort_id']}/leader").decode(errors="replace")
    generation = json.loads(leader[leader.index("{"):])["generation"]
    for key, value in values.items():
        stranger.set(f"hangwatch/{joined['cohort_id']}/{generation}/{key}", value)


HOSTILE_VALUES = {"incident/1": b"[" * 400_000 + b"]" * 400_000, "stop": b"\xff\xfe",
                  "incident/2": b'{"attempt": 2, "node": 0, "kind": "stall", "reason": "x", "wall": NaN}'}


@pytest.mark.timeout(240)
def test_hostile_store_values_are_ignored_and_every_node_trains_on_to_the_end(job_factory):
    """Before: a 400 KB-deep incident record raised RecursionError in every node's reader (exit 70 on
    both, and --resume refused the job as an internal error)."""
    job = job_factory(2, steps=40, lease=5.0)
    _wait_training(job, 0)
    _wait_training(job, 1)
    _stranger_writes(job, HOSTILE_VALUES)
    codes = job.wait(200)
    assert codes == [0, 0], [job.output(i) for i in range(2)]
    for i in range(2):
        records = job.journal(i)
        ignored = [r["key"].rsplit("/", 2)[-2:] for r in records if r["event"] == "cohort_value_ignored"]
        assert ["incident", "1"] in ignored and ignored.count(["incident", "1"]) == 1, ignored
        assert any(r["event"] == "cohort_unauthenticated" for r in records)
        assert not [r for r in records if r["event"] in ("cohort_incident", "member_lost")]


@pytest.mark.timeout(180)
def test_a_garbled_stop_value_does_not_turn_off_lost_node_detection(job_factory):
    """Before: two bytes under ``stop`` ended each lease round before its check; a node whose supervisor
    was then SIGKILLed was reported 25 s later under a 6 s lease, or never."""
    job = job_factory(2, steps=400, lease=5.0)
    _wait_training(job, 0)
    _wait_training(job, 1)
    _stranger_writes(job, {"stop": b"\xff\xfe" + b"{" * 1000})
    time.sleep(2)
    os.kill(job.procs[1].pid, signal.SIGKILL)
    killed_at = time.monotonic()
    code = job.procs[0].wait(timeout=90)
    assert code == 75, job.output(0)
    lost = next(r for r in job.journal(0) if r["event"] == "member_lost")
    assert "node 1 unreachable" in lost["reason"]
    assert lost["ts"] - (time.time() - (time.monotonic() - killed_at)) <= 5.0 + 2 * 0.5 + 2.0, lost


def _secret_file(tmp_path: Path) -> list[str]:
    secret = tmp_path / "cohort.secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    secret.chmod(0o600)
    return ["--cohort-secret-file", str(secret)]


def _training_secret_job(job_factory, tmp_path, steps):
    """A 2-node job sharing a secret, both nodes training: (job, store host, store port)."""
    job = job_factory(2, steps=steps, lease=5.0, extra={i: _secret_file(tmp_path) for i in range(2)})
    _wait_training(job, 0)
    _wait_training(job, 1)
    joined = next(r for r in job.journal(0) if r["event"] == "cohort_joined")
    host, _, port = joined["store"].rpartition(":")
    return job, host, int(port)


@pytest.mark.timeout(240)
def test_with_a_secret_a_stranger_on_the_port_gets_nothing_in_and_every_node_trains_to_the_end(job_factory, tmp_path):
    """A stranger who reached the port, without the job's secret, tries to list, overwrite and delete
    keys with a c10d client, and to write deep, huge, non-UTF-8 and non-finite values, a forged
    incident and a forged stop, and floods the port with connections. Before (c10d's store with MACs
    on the records): it erased a node's lease or records and the job ended (75) or stalled."""
    job, host, port = _training_secret_job(job_factory, tmp_path, steps=40)
    results = stranger_attacks(host, port)
    assert set(results.values()) <= {"refused", "dropped"}, results
    codes = job.wait(200)
    assert codes == [0, 0], [job.output(i) for i in range(2)]
    for i in range(2):
        records = job.journal(i)
        assert next(r for r in records if r["event"] == "cohort_joined")["authenticated"] is True
        assert not [r for r in records if r["event"] in ("cohort_incident", "member_lost", "cohort_unauthenticated",
                                                          "cohort_value_ignored")]
    assert not job.leftovers()


@pytest.mark.timeout(180)
def test_with_a_secret_a_killed_node_is_reported_lost_within_the_lease_while_a_stranger_hammers_the_port(
        job_factory, tmp_path):
    job, host, port = _training_secret_job(job_factory, tmp_path, steps=400)
    results = stranger_attacks(host, port)
    os.kill(job.procs[1].pid, signal.SIGKILL)
    killed_at = time.monotonic()
    attacks = stranger_attacks(host, port)  # and again while node 0 judges node 1's lease
    code = job.procs[0].wait(timeout=90)
    assert set(results.values()) <= {"refused", "dropped"}, results
    assert set(attacks.values()) <= {"refused", "dropped", "gone"}, attacks  # (node 0 stops at the lease)
    assert code == 75, job.output(0)
    lost = next(r for r in job.journal(0) if r["event"] == "member_lost")
    assert "node 1 unreachable" in lost["reason"]
    assert lost["ts"] - (time.time() - (time.monotonic() - killed_at)) <= 5.0 + 2 * 0.5 + 2.0, lost
