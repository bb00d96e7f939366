"""Each trainer process's own beat file (``heartbeat-<pid>.json``): written beside the shared one,
private, with the process's rank and its final beat; read back bounded and never through a link."""

from __future__ import annotations

import os

import pytest

from hangwatch.contract.heartbeat import (MAX_RANK_BEACONS, beat, rank_beacon_file, read_heartbeat,
                                          read_rank_beacons)

pytestmark = pytest.mark.timeout(30)


def test_a_beat_is_written_to_the_shared_file_and_to_the_process_own_file(tmp_path, monkeypatch):
    shared = tmp_path / "heartbeat.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(shared))
    monkeypatch.setenv("RANK", "3")
    assert beat(step=7, phase="train")
    own = rank_beacon_file(shared, os.getpid())
    assert os.path.basename(own) == f"heartbeat-{os.getpid()}.json"
    mine = read_heartbeat(own)
    assert mine == read_heartbeat(shared)
    assert (mine.rank, mine.final, mine.step) == (3, False, 7)
    assert os.stat(own).st_mode & 0o777 == 0o600
    assert read_rank_beacons(shared) == (mine,)


def test_the_rank_comes_from_local_rank_without_rank_and_is_absent_without_either(tmp_path, monkeypatch):
    shared = tmp_path / "heartbeat.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(shared))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    beat(step=1)
    assert read_heartbeat(shared).rank == 1
    monkeypatch.delenv("LOCAL_RANK")
    beat(step=2)
    hb = read_heartbeat(shared)
    assert hb.rank is None and "rank" not in hb.to_json()
    assert hb.who == f"pid {os.getpid()}"


def test_a_final_beat_says_the_process_is_done(tmp_path, monkeypatch):
    shared = tmp_path / "heartbeat.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(shared))
    beat(step=9, phase="train_end", final=True)
    (own,) = read_rank_beacons(shared)
    assert own.final and own.phase == "train_end"


def test_links_junk_and_engine_files_are_no_rank_beat(tmp_path):
    shared = tmp_path / "heartbeat.json"
    target = tmp_path / "elsewhere.json"
    target.write_text('{"pid": 5, "seq": 1, "ts": 1.0, "step": 1, "phase": "train"}')
    os.symlink(target, tmp_path / "heartbeat-5.json")
    (tmp_path / "heartbeat-6.json").write_text("{half")
    (tmp_path / "heartbeat-x.json").write_text(target.read_text())
    (tmp_path / "engine-heartbeat-7.json").write_text(target.read_text().replace('"pid": 5', '"pid": 7'))
    assert read_rank_beacons(shared) == ()


def test_only_the_newest_files_are_read(tmp_path):
    shared = tmp_path / "heartbeat.json"
    for pid in range(1, MAX_RANK_BEACONS + 6):
        path = tmp_path / f"heartbeat-{pid}.json"
        path.write_text(f'{{"pid": {pid}, "seq": 1, "ts": 1.0, "step": 1, "phase": "train"}}')
        os.utime(path, (pid, pid))
    beats = read_rank_beacons(shared)
    assert len(beats) == MAX_RANK_BEACONS
    assert min(b.pid for b in beats) == 6
