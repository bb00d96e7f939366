"""What reading another user's files holds in memory.

`status` and `report` on a run dir another user can write folded its whole journal: 200 MB
of tiny records was 1.7 GB (the 1 GiB cap about 8 GB). A checkpoint marker the trainer's
user writes was parsed whole: 64 MiB of `[{},{},...]` was a 1.7 GB peak in the supervisor.
Bounds are measured with tracemalloc on inputs scaled to a budget made small for the test.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from hangwatch.cli import run_page as runreport, run_summary as status
from hangwatch.contract import journal
from hangwatch.supervisor.decide import checkpoints

pytestmark = pytest.mark.timeout(60)


def _record(event: str, **fields) -> bytes:
    return json.dumps({"event": event, "ts": 1_700_000_000.0, "run_id": "r", **fields}).encode() + b"\n"


def _flooded_run(run: Path, megabytes: int) -> Path:
    """A real run's first and last records around ``megabytes`` of tiny ones."""
    run.mkdir(mode=0o700)
    path = run / "journal.jsonl"
    with path.open("wb") as f:
        f.write(_record("run_started", pid=1) + _record("attempt_started", attempt=1, pid=2, env={}))
        f.write(b'{"event":"x","ts":1}\n' * ((megabytes << 20) // 21))
        f.write(_record("attempt_ended", attempt=1, kind="done", exit_code=0)
                + _record("run_finished", outcome="done", exit_code=0, reason="the trainer finished"))
    return path


def _peak(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_status_of_a_flooded_journal_holds_its_budget_not_the_file(tmp_path, monkeypatch):
    """8 MiB of tiny records (400k dicts when read whole: over 100 MB) under a 64 KiB budget:
    status keeps the first and the last records, says how much it left out, and its peak is
    a few MiB."""
    path = _flooded_run(tmp_path / "run", 8)
    monkeypatch.setattr(journal, "MAX_SHOWN_WEIGHT", 64 << 10, raising=False)
    summary, peak = _peak(lambda: status.summarise(path))
    assert peak < 8 << 20, f"status held {peak >> 20} MiB for a 64 KiB budget"
    assert summary["state"] == "finished: done (exit 0)"
    assert [a["outcome"] for a in summary["attempts"]] == ["done"]
    assert summary["journal_left_out_bytes"] > 7 << 20
    assert "were not read" in status.render_status(summary)


def test_report_of_a_flooded_journal_holds_its_budget_and_says_so(tmp_path, monkeypatch):
    path = _flooded_run(tmp_path / "run", 8)
    monkeypatch.setattr(journal, "MAX_SHOWN_WEIGHT", 64 << 10, raising=False)
    (target, g), peak = _peak(lambda: runreport.write_run_report(path.parent))
    assert peak < 8 << 20, f"report held {peak >> 20} MiB for a 64 KiB budget"
    assert g["journal_left_out_bytes"] > 7 << 20
    assert "not read" in target.read_text()


def test_a_journal_under_the_budget_reads_as_every_record(tmp_path):
    """A real run's journal is far under the budget: the same records as read_journal, nothing
    said of left-out bytes (status and report unchanged); a torn last line and a junk line
    are skipped alike."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    path = run / "journal.jsonl"
    path.write_bytes(_record("run_started", pid=1) + b"junk\n" + _record("attempt_started", attempt=1, pid=2, env={})
                     + b'{"event":"attempt_ended","ts":1')
    records, left_out = journal.read_journal_bounded(path)
    assert (records, left_out) == (journal.read_journal(path), 0)
    summary = status.summarise(path)
    assert summary["journal_left_out_bytes"] == 0
    assert "not read" not in status.render_status(summary)


def test_the_bounded_read_keeps_a_prefix_and_a_suffix_of_whole_records(tmp_path):
    lines = [_record("x", n=i, pad="a" * (i % 37)) for i in range(2000)]
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(lines))
    full = [r["n"] for r in journal.read_journal(path)]
    records, left_out = journal.read_journal_bounded(path, budget=20_000)
    got = [r["n"] for r in records]
    head = next(i for i, n in enumerate(got) if n != full[i])
    assert got[:head] == full[:head] and got[head:] == full[len(full) - (len(got) - head):]
    assert 0 < len(got) < len(full)
    assert left_out == sum(len(line) for line in lines[head:len(full) - (len(got) - head)])


def test_a_marker_of_a_million_values_is_judged_without_parsing_them(tmp_path):
    """`[{},{},...]` as trainer_state.json: 3 MiB of it was 1M dicts (~100 MB) in the supervisor.
    Judged by its end instead: complete when it ends like a document, torn when not."""
    ckpt = tmp_path / "checkpoint-1"
    ckpt.mkdir()
    marker = ckpt / "trainer_state.json"
    marker.write_bytes(b"[" + b"{}," * (1 << 20) + b"{}]")
    problem, peak = _peak(lambda: checkpoints._incomplete(ckpt, "trainer_state.json"))
    assert problem is None
    assert peak < 16 << 20, f"judging the marker held {peak >> 20} MiB"
    marker.write_bytes(b"[" + b"{}," * (1 << 20))
    assert "does not end like" in checkpoints._incomplete(ckpt, "trainer_state.json")


def test_a_real_marker_is_still_parsed_whole(tmp_path):
    ckpt = tmp_path / "checkpoint-1"
    ckpt.mkdir()
    state = {"global_step": 10, "log_history": [{"loss": 1.5, "step": s} for s in range(1000)]}
    (ckpt / "trainer_state.json").write_text(json.dumps(state, indent=2))
    assert checkpoints._incomplete(ckpt, "trainer_state.json") is None
    (ckpt / "trainer_state.json").write_text(json.dumps(state, indent=2)[:-40] + "}")  # torn, ends like a document
    assert "unreadable" in checkpoints._incomplete(ckpt, "trainer_state.json")


def test_a_journal_that_grows_while_it_is_read_is_read_to_its_new_end(tmp_path, monkeypatch):
    """A live run (or a hostile writer) appends while `status` reads: its head passed the size
    the file had when opened, and the tail's read was asked for a negative length."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(_record("run_started", pid=1) * 3)
    real = journal.parse_record

    def appending(raw):
        if path.stat().st_size < 1 << 20:
            with path.open("ab") as f:
                f.write(b'{"event":"x","ts":1}\n' * 60_000 + _record("run_finished", outcome="done", exit_code=0))
        return real(raw)

    monkeypatch.setattr(journal, "parse_record", appending)
    records, left_out = journal.read_journal_bounded(path, budget=5_000)
    assert records[0]["event"] == "run_started" and records[-1]["event"] == "run_finished"
    assert left_out > 1 << 20


def _incidents_naming(run: Path, bundles: list[Path]) -> Path:
    run.mkdir(mode=0o700, exist_ok=True)
    path = run / "journal.jsonl"
    with path.open("wb") as f:
        f.write(_record("run_started", pid=1) + _record("attempt_started", attempt=1, pid=2, env={}))
        for bundle in bundles:
            f.write(_record("incident", attempt=1, kind="stall", reason="r", latency_s=1.0)
                    + _record("capture", attempt=1, evidence_path=str(bundle)))
    return path


def _manifest_reads(monkeypatch) -> list[str]:
    from hangwatch.supervisor.operate import evidence
    reads: list[str] = []
    real = evidence.read_capped

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(evidence, "read_capped", counted)
    monkeypatch.setattr(status, "_manifests", {}, raising=False)
    monkeypatch.setattr(status, "_manifest_bytes", [0], raising=False)
    return reads


def test_status_parses_each_manifest_once_however_many_incidents_name_it(tmp_path, monkeypatch):
    """200 incidents naming one 4 MiB manifest of `[{},...]` (or links to it, from bundles of
    their own) kept `status` 30 s: every incident parsed it again. Each file is parsed once."""
    heavy = tmp_path / "b0"
    heavy.mkdir()
    (heavy / "manifest.json").write_bytes(b"[" + b"{}," * 100_000 + b"{}]")
    bundles = [heavy]
    for i in range(1, 40):
        bundles.append(tmp_path / f"b{i}")
        bundles[-1].mkdir()
        os.link(heavy / "manifest.json", bundles[-1] / "manifest.json")
    path = _incidents_naming(tmp_path / "run", bundles * 5)
    reads = _manifest_reads(monkeypatch)
    summary = status.summarise(path)
    assert len(summary["incidents"]) == 200
    assert len(reads) == 1, f"{len(reads)} manifest reads"
    assert {i["evidence_path"] for i in summary["incidents"]} == {str(b) for b in bundles}


def test_manifests_past_the_budget_are_not_read_and_real_ones_still_show(tmp_path, monkeypatch):
    bundles = []
    for i in range(6):
        bundles.append(tmp_path / f"b{i}")
        bundles[-1].mkdir()
        manifest = {"classification": {"signature_id": f"sig-{i}", "title": "t"}, "pad": "x" * 1000}
        (bundles[-1] / "manifest.json").write_text(json.dumps(manifest))
    path = _incidents_naming(tmp_path / "run", bundles)
    reads = _manifest_reads(monkeypatch)
    assert [i["signature"] for i in status.summarise(path)["incidents"]] == [f"sig-{i}" for i in range(6)]
    reads = _manifest_reads(monkeypatch)
    monkeypatch.setattr(status, "_MANIFEST_BUDGET", 3000, raising=False)
    shown = [i["signature"] for i in status.summarise(path)["incidents"]]
    assert shown == ["sig-0", "sig-1", None, None, None, None] and len(reads) == 2
