"""Round 6 of hostile inputs: a sent bundle whose JSON costs far more to read than its size.

A .tar.gz of a few hundred KB inflates to 31 MiB of ``{},{},...``: as a stack file (10 M frames)
it kept `replay` 242 s at 4.4 GB and `report` 188 s at 5.4 GB; as ``processes.json`` it kept
`report` 419 s and took 24 GB. And ``processes.json`` was parsed again for every stack file: 200
stack files and a 25 MB table kept `replay` 109 s (4,000 files: over half an hour).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangwatch.diagnostics import bundle as bundle_mod
from hangwatch.diagnostics import report as report_mod
from hangwatch.diagnostics.bundle import Bundle, load_bundle
from hangwatch.diagnostics.replay import analyse, render_text
from hangwatch.diagnostics.report import render_report
from hangwatch.diagnostics.signatures import load_signatures

pytestmark = pytest.mark.timeout(60)

_MANIFEST = {"schema": 1, "kind": "hangwatch-incident", "verdict": {"kind": "stall", "reason": "r"}}


def _dump(pid: int, frames: int = 3) -> list[dict]:
    return [{"pid": pid, "thread_id": 1, "os_thread_id": pid, "thread_name": "MainThread", "owns_gil": False,
             "active": False, "frames": [{"name": f"f{i}", "filename": "/srv/train.py", "line": i + 1}
                                         for i in range(frames)]}]


def _write(tmp_path: Path, files: dict[str, object]) -> Path:
    root = tmp_path / "bundle"
    for name, data in {"manifest.json": _MANIFEST, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data))
    return root


def test_the_process_table_is_parsed_once_for_all_stack_files(tmp_path, monkeypatch):
    files: dict[str, object] = {f"stacks/round-1/pid-{p}.json": _dump(p) for p in range(100, 150)}
    files["processes.json"] = [{"pid": p, "ppid": 1, "name": "python", "cmdline": ["python", f"rank{p}"]}
                               for p in range(100, 150)]
    bundle = load_bundle(_write(tmp_path, files))
    parsed: list[str] = []
    original = Bundle.json

    def counting(self: Bundle, name: str, default: object = None) -> object:
        parsed.append(name)
        return original(self, name, default)

    monkeypatch.setattr(Bundle, "json", counting)
    dumps = bundle.dumps()
    assert len(dumps) == 50 and {d.cmdline for d in dumps} == {f"python rank{p}" for p in range(100, 150)}
    assert parsed.count("processes.json") == 1


def test_stack_files_past_the_object_budget_are_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_STACK_OBJECTS", 1000)
    bomb = '[{"pid": 7, "frames": [' + ",".join(["{}"] * 5000) + "]}]"
    path = _write(tmp_path, {"stacks/round-1/pid-7.json": bomb, "stacks/round-1/pid-8.json": _dump(8),
                             "stacks/round-2/pid-8.json": _dump(8)})
    bundle = load_bundle(path)
    assert [d.pid for d in bundle.dumps()] == [8, 8]
    assert bundle.left_out == ["stacks/round-1/pid-7.json"]
    page = render_report(bundle)
    assert "stacks/round-1/pid-7.json" in page and "more objects than a capture writes" in page
    assert "left out: stacks/round-1/pid-7.json" in render_text(analyse([path], load_signatures()), {
        "incidents": 1, "signatures": {}, "recurring_frames": [], "call_tree": {"children": []}})


def test_a_process_table_past_its_budget_or_too_wide_to_show_is_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_TABLE_OBJECTS", 1000)
    bomb = "[" + ",".join(["{}"] * 5000) + "]"
    page = render_report(load_bundle(_write(tmp_path / "a", {"processes.json": bomb})))
    assert "processes.json" in page and "more objects than a capture writes" in page and page.count("<li>") == 0

    monkeypatch.setattr(report_mod, "MAX_TREE_ROWS", 100)
    rows = [{"pid": p, "ppid": 1, "name": f"w{p}"} for p in range(2, 400)] + [{"pid": 1, "ppid": 0, "name": "root"}]
    page = render_report(load_bundle(_write(tmp_path / "b", {"processes.json": rows})))
    assert page.count("<li>") == 100 and "... 299 more process(es) not shown" in page
    assert page.count("<ul class=tree>") == page.count("</ul>")


def test_a_frame_name_never_forges_a_line_in_replays_text(tmp_path):
    """A trainer names its code as it likes (compile()'s filename, a code object's co_name), and
    py-spy reports it as it is: a newline in it forged "== NAME (bundle)" lines in replay's text."""
    from hangwatch.diagnostics.replay import aggregate, processes_overview

    dump = _dump(9)
    dump[0]["frames"][0].update(name="wait\n== forged (bundle)", filename="/srv/a\n== forged2 (bundle).py")
    incidents = analyse([_write(tmp_path, {"stacks/round-1/pid-9.json": dump})], load_signatures())
    text = render_text(incidents, aggregate(incidents), processes_overview(incidents))
    assert "forged" in text and not [line for line in text.splitlines() if line.startswith("== forged")]


def test_a_frame_name_never_forges_a_frame_in_the_reports_stacks(tmp_path):
    dump = _dump(9)
    dump[0]["frames"][0].update(name="wait", filename="/srv/a.py\n    forged (b.py:1)")
    page = render_report(load_bundle(_write(tmp_path, {"stacks/round-1/pid-9.json": dump})))
    pre = [block.split("</pre>")[0] for block in page.split("<pre>")[1:]]
    assert pre and not [line for block in pre for line in block.split("\n") if line.lstrip().startswith("forged")]
    assert "a.py\\n    forged (b.py:1)" in page


def test_replay_holds_no_bundles_bytes_after_reading_each(tmp_path):
    """A run directory of 30 bundles with three sparse 31 MiB logs each (368 KB on disk) held
    2.9 GB in `replay`: every bundle's bytes were kept until the last input was read."""
    from hangwatch.diagnostics.replay import aggregate

    run = tmp_path / "run" / "incidents"
    for i in range(3):
        bundle = _write(run / f"b{i}", {"stacks/round-1/pid-9.json": _dump(9), "samples.jsonl": ""})
        target = run / f"20260101T00000{i}-attempt1-stall"
        bundle.rename(target)
        (target / "logs").mkdir()
        with open(target / "logs" / "stdout.tail.txt", "wb") as handle:
            handle.truncate(4 << 20)  # sparse: costs no disk
        (run / f"b{i}").rmdir()
    incidents = analyse([tmp_path / "run"], load_signatures())
    assert len(incidents) == 3
    assert all(set(i.source.bundle.files) == {"manifest.json"} for i in incidents)
    assert [i.to_json()["verdict"] for i in incidents] == ["stall"] * 3
    assert "== across 3 incident(s)" in render_text(incidents, aggregate(incidents))
