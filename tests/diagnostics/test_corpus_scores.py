"""The corpus scorer's per-collection line: the first pass replay recorded, today's
score, and what a reader of the paste alone named (the ceiling the paste allows)."""

from __future__ import annotations

from hangwatch.diagnostics.corpus import main

DUMP = 'Thread 1 (idle): "MainThread"\n    _acquire (filelock/_unix.py:40)\n    acquire (filelock/_api.py:300)\n    main (run.py:9)\n'


def _dump(tmp_path, name, **meta):
    (tmp_path / f"{name}.txt").write_text(DUMP)
    (tmp_path / f"{name}.meta").write_text("".join(f"{k}: {v}\n" for k, v in meta.items()))


def test_a_collections_line_counts_its_first_pass_and_its_blind_readings(tmp_path, capsys):
    _dump(tmp_path, "a", expected="file-lock-wait", collection="fresh-x", first_pass="unknown", blind_reading="file-lock-wait")
    _dump(tmp_path, "b", expected="file-lock-wait", collection="fresh-x", first_pass="file-lock-wait", blind_reading="lock-wait")
    _dump(tmp_path, "c", expected="file-lock-wait", collection="fresh-x", first_pass="file-lock-wait")
    assert main([str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("collection=fresh-x"))
    assert "known_cause=3 first_pass_right=2 right=3" in line
    assert "blind_read=2 blind_reading_right=1 first_pass_right_of_those=1" in line


def test_a_collection_nobody_read_blind_says_nothing_of_it(tmp_path, capsys):
    _dump(tmp_path, "a", expected="file-lock-wait", collection="fresh-y", first_pass="unknown")
    assert main([str(tmp_path)]) == 0
    assert "blind" not in capsys.readouterr().out
