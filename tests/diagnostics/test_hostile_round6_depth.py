"""Round 6 of hostile inputs: nesting as deep as the trainer makes it.

A process tree or a stack is as deep as the trainer's code makes it (a chain of nested
shells, a recursion with a raised limit), and a sent bundle's rows may repeat a pid. The
report's process tree and replay's merged call tree were built by recursion, one level per
process or frame: a real chain of 700 nested shells left the capture's bundle without its
report.html (RecursionError) and `hangwatch report` refused hangwatch's own bundle; a trainer
stalled 3,000 frames deep made `hangwatch replay` of its bundle fail the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangwatch.diagnostics.bundle import load_bundle
from hangwatch.diagnostics.replay import aggregate, analyse, processes_overview, render_text
from hangwatch.diagnostics.report import render_report
from hangwatch.diagnostics.signatures import load_signatures

pytestmark = pytest.mark.timeout(60)


def _bundle(tmp_path: Path, files: dict[str, object]) -> Path:
    root = tmp_path / "20260101T000000-attempt1-silent_hang"
    manifest = {"schema": 1, "kind": "hangwatch-incident", "run_id": "r", "attempt": 1,
                "verdict": {"kind": "silent_hang", "reason": "no progress"}}
    for name, data in {"manifest.json": manifest, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    return root


def test_a_process_tree_thousands_deep_is_in_the_report(tmp_path):
    rows = [{"pid": pid, "ppid": pid - 1, "name": f"sh{pid}", "cmdline": ["sh", "chain.sh"]} for pid in range(100, 3100)]
    page = render_report(load_bundle(_bundle(tmp_path, {"processes.json": rows})))
    assert page.count("<li>") == 3000 and page.count("</li>") == 3000
    assert page.index("sh100<") < page.index("sh3099<")  # parent before child, nested


def test_rows_that_repeat_a_pid_are_each_shown_once(tmp_path):
    rows = [{"pid": 7, "ppid": 1, "name": "root"}, {"pid": 7, "ppid": 7, "name": "again"},
            {"pid": 8, "ppid": 7, "name": "child"}]
    page = render_report(load_bundle(_bundle(tmp_path, {"processes.json": rows})))
    assert page.count("<li>") == 3 and page.count("<b>again</b>") == 1


def test_a_stack_thousands_of_frames_deep_replays(tmp_path):
    frames = [{"name": "work", "filename": "/srv/train.py", "line": 9}] + \
        [{"name": f"f{i}", "filename": "/srv/train.py", "line": i} for i in range(3000)]
    dump = [{"pid": 4242, "thread_id": 1, "os_thread_id": 4242, "thread_name": "MainThread", "owns_gil": False,
             "active": False, "frames": frames}]
    bundle = _bundle(tmp_path, {"stacks/round-1/pid-4242.json": dump,
                                "processes.json": [{"pid": 4242, "ppid": 1, "name": "python"}]})
    incidents = analyse([bundle], load_signatures())
    agg = aggregate(incidents)
    assert json.loads(json.dumps(agg))["incidents"] == 1  # --json
    text = render_text(incidents, agg, processes_overview(incidents))
    assert "frames ...]" in text and "f2999 (train.py)" in text and "work (train.py)" in text
