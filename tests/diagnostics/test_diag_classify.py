"""Classification against the shipped signatures, priorities, frozen threads,
and strict loading of signature files."""

from __future__ import annotations

import pytest

from diag_helpers import DATA
from hangwatch.diagnostics.classify import classify
from hangwatch.diagnostics.errors import SignatureFileError
from hangwatch.diagnostics.pyspy import parse_json, parse_text
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import Frame, ProcessDump, ProcessSeries, ThreadDump, group_series

SIGS = load_signatures()


def _classify(name: str, signatures=SIGS):
    path = DATA / name
    dumps = [parse_json(path.read_text())] if name.endswith(".json") else parse_text(path.read_text())
    return classify(group_series(dumps), signatures)


@pytest.mark.parametrize(
    ("fixture", "signature", "evidence"),
    [
        ("gpu_model_runner_native.txt", "cuda-synchronize-wait", "cuEventSynchronize (libcuda.so.1)"),
        ("nccl_all_reduce.txt", "nccl-collective-wait", "all_reduce (distributed_c10d.py:2501)"),
        ("gdn_chunk.txt", "gated-deltanet-kernel", "chunk_gated_delta_rule (chunk.py:311)"),
        ("cuda_graph_real.json", "vllm-cuda-graph-replay", "CUDAGraphWrapper.replay (cuda_graph.py:14)"),
    ],
)
def test_fixtures_match_their_signature(fixture, signature, evidence):
    c = _classify(fixture)
    assert c.signature_id == signature
    assert evidence in [f.render() for f in c.evidence]
    assert c.thread_name == "MainThread" and c.advice


def test_cuda_graph_replay_anywhere_beats_the_synchronize_it_causes():
    c = _classify("cuda_graph_and_sync.txt")
    assert c.signature_id == "vllm-cuda-graph-replay"
    assert c.thread_name == "cuda-graph-runner"
    assert "cuda-synchronize-wait" in {m.signature_id for m in c.also}


def test_unknown_reports_innermost_own_frames():
    c = _classify("unknown_reward.txt")
    assert c.signature_id is None and c.title.startswith("No known signature")
    # ssl.py and socket.py are standard library: the first telling frame is the HTTP client
    # library or the user's code, never stdlib.
    assert all(not f.is_stdlib for f in c.evidence)
    assert [f.render() for f in c.evidence] == [
        "_make_request (connectionpool.py:537)",
        "urlopen (connectionpool.py:793)",
        "send (adapters.py:667)",
        "post (api.py:115)",
        "score_with_judge (judge.py:48)",
    ]


def test_a_frozen_match_beats_a_thread_that_moved():
    replay = (Frame("replay", "vllm/compilation/cuda_graph.py", 10),)
    lock = (Frame("Event.wait", "/usr/lib/python3.11/threading.py", 629),)
    r1 = ProcessDump(1, (ThreadDump("1", "MainThread", replay), ThreadDump("2", "waiter", lock)), round=1)
    r2 = ProcessDump(1, (ThreadDump("1", "MainThread", (Frame("replay", "vllm/compilation/cuda_graph.py", 11),)), ThreadDump("2", "waiter", lock)), round=2)
    c = classify(group_series([r1, r2]), SIGS)
    assert c.signature_id == "lock-wait" and c.frozen is True
    c_all_moving = classify((ProcessSeries(1, (r1, r2)),), [s for s in SIGS if s.id != "lock-wait"])
    assert c_all_moving.signature_id == "vllm-cuda-graph-replay" and c_all_moving.frozen is False


def test_user_signatures_extend_and_override(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text(
        '[[signature]]\nid = "judge-http"\ntitle = "Reward judge HTTP call never returns"\npriority = 70\n'
        'frames = [{ function = "score_with_judge" }]\nadvice = "Set a timeout on the judge request."\n'
        '[[signature]]\nid = "lock-wait"\ntitle = "Overridden"\nframes = [{ function = "nothing-matches-this" }]\nadvice = "x"\n'
    )
    sigs = load_signatures([user])
    c = _classify("unknown_reward.txt", sigs)
    assert c.signature_id == "judge-http" and c.advice == "Set a timeout on the judge request."
    assert next(s for s in sigs if s.id == "lock-wait").title == "Overridden"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('[[signature]]\nid = "a"\ntitle = "t"\nadvice = "x"\nframes = [{ function = "f" ]\n', r"line 5"),
        ('[[signature]]\nid = "ok"\ntitle = "t"\nadvice = "x"\nframes = [{ function = "f" }]\n\n[[signature]]\ntitle = "no id"\nadvice = "x"\nframes = [{ function = "f" }]\n',
         r"line 7: signature #2: missing or invalid 'id'"),
        ('[[signature]]\nid = "bad-re"\ntitle = "t"\nadvice = "x"\nframes = [{ function = "(unclosed", regex = true }]\n',
         r"line 1: signature #1 \('bad-re'\): frames\[1\].function: bad regex"),
        ('[[signature]]\nid = "k"\ntitle = "t"\nadvice = "x"\nframe = []\n', r"unknown key\(s\) \['frame'\]"),
        ('[[signature]]\nid = "p"\ntitle = "t"\nadvice = "x"\npriority = "high"\nframes = [{ file = "x.py" }]\n', r"'priority' must be an integer"),
    ],
)
def test_bad_signature_files_name_file_and_line(tmp_path, content, expected):
    path = tmp_path / "sigs.toml"
    path.write_text(content)
    with pytest.raises(SignatureFileError, match=expected) as info:
        load_signatures([path])
    assert str(path) in str(info.value)


def test_missing_signature_file_is_a_clear_error(tmp_path):
    with pytest.raises(SignatureFileError, match="cannot read signature file"):
        load_signatures([tmp_path / "nope.toml"])


def test_shipped_signatures_are_ordered_by_priority():
    ids = [s.id for s in SIGS]
    assert ids[0] == "vllm-cuda-graph-replay"
    assert ids.index("vllm-cuda-graph-replay") < ids.index("cuda-synchronize-wait") < ids.index("lock-wait")
    assert {"gated-deltanet-kernel", "nccl-collective-wait", "dataloader-wait", "vllm-engine-core-ipc"} <= set(ids)
