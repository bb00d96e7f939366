"""Signature files: the shipped ones are ordered and cite their sources; user files extend
and override them, and a bad, missing or hostile file is refused by name."""

from __future__ import annotations

import os

import pytest

from diag_helpers import DATA, ROOT, text_verdict, usage_error
from hangwatch.diagnostics.classify import classify
from hangwatch.diagnostics.errors import SignatureFileError
from hangwatch.diagnostics.pyspy import parse_json, parse_text
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import Frame, ThreadDump, group_series


SIGS = load_signatures()


def _classify(name: str, signatures=SIGS):
    path = DATA / name
    dumps = [parse_json(path.read_text())] if name.endswith(".json") else parse_text(path.read_text())
    return classify(group_series(dumps), signatures)


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
        ('[[signature]]\nid = "k2"\ntitle = "t"\nadvice = "x"\nkind = "fatal"\nframes = [{ file = "x.py" }]\n', r"'kind' must be one of"),
        ('[[signature]]\nid = "i"\ntitle = "t"\nadvice = "x"\ninnermost = 0\nframes = [{ file = "x.py" }]\n', r"'innermost' must be a positive integer"),
        ('[[signature]]\nid = "c"\ntitle = "t"\nadvice = "x"\ncollective = "yes"\nframes = [{ file = "x.py" }]\n', r"'collective' must be true or false"),
        ('[[signature]]\nid = "f"\ntitle = "t"\nadvice = "x"\nframes = [{ file = "x.py", innermost = 0 }]\n',
         r"frames\[1\]: 'innermost' must be true, false or a positive number"),
        ('[[signature]]\nid = "o"\ntitle = "t"\nadvice = "x"\nframes = [{ file = "x.py", outermost = 1 }]\n',
         r"frames\[1\]: 'outermost' must be true or false"),
        ('[[signature]]\nid = "s"\ntitle = "t"\nframes = [{ file = "x.py" }]\n', r"missing 'advice'"),
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


def test_every_shipped_signature_cites_where_it_was_learned():
    for sig in SIGS:
        assert sig.reference, f"{sig.id} has no source"
        assert sig.kind in ("stall", "idle", "helper")
        if sig.kind == "stall":
            assert sig.advice


@pytest.mark.timeout(10)
def test_a_signature_file_that_is_a_fifo_device_or_huge_is_refused_by_name(tmp_path, capsys):
    dump = str(ROOT / "tests" / "diagnostics" / "data" / "nccl_all_reduce.txt")
    fifo = tmp_path / "sig.toml"
    os.mkfifo(fifo)
    sparse = tmp_path / "huge.toml"
    with open(sparse, "wb") as fh:
        fh.truncate(3 << 30)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    for path, why in ((fifo, "it is a FIFO"), ("/dev/zero", "it is a character device"), (sparse, "3.0 GiB"),
                      (deep, "nested too deeply")):
        err = usage_error(capsys, "replay", "--signatures", str(path), dump)
        assert f"{path}: " in err and why in err, err


def test_a_frame_pattern_may_ask_for_the_threads_outermost_frame(tmp_path):
    """``outermost = true``: an exit hook the interpreter runs (logging's ``shutdown`` at
    exit) matches; the same function called by the program's own code does not."""
    path = tmp_path / "sigs.toml"
    path.write_text('[[signature]]\nid = "exit"\ntitle = "t"\nadvice = "x"\n'
                    'frames = [{ function = "shutdown", file = "logging/__init__.py", outermost = true }]\n')
    (sig,) = load_signatures([path], builtin=False)
    wait = (Frame("wait", "threading.py", 320), Frame("join", "queue.py", 89), Frame("flush", "watchtower/__init__.py", 254))
    hook = Frame("shutdown", "logging/__init__.py", 2036)
    assert sig.match_thread(ThreadDump("1", "MainThread", wait + (hook, Frame("Py_FinalizeEx", "libpython3.11.so", None, native=True))), "")
    called = wait + (hook, Frame("_clearExistingHandlers", "logging/config.py", 275), Frame("main", "app.py", 9))
    assert not sig.match_thread(ThreadDump("1", "MainThread", called), "")


def test_a_pattern_for_a_bare_name_matches_the_method_py_spy_qualifies(tmp_path):
    """py-spy 0.4 and Python 3.11's faulthandler name a method with its class
    (``SimpleQueue.get``) where older dumps said ``get``: a pattern written as ``^get$``
    matches both (a live pool worker waiting for its next task read as a queue wait);
    one that names the class stays strict, and a native name is taken whole."""
    path = tmp_path / "sigs.toml"
    path.write_text('[[signature]]\nid = "bare"\ntitle = "t"\nadvice = "x"\n'
                    'frames = [{ function = "^get$", regex = true, file = "multiprocessing/queues.py" }]\n'
                    '[[signature]]\nid = "strict"\ntitle = "t"\nadvice = "x"\n'
                    'frames = [{ function = "^Event\\\\.wait$", regex = true }]\n')
    bare, strict = load_signatures([path], builtin=False)
    assert bare.match_thread(ThreadDump("1", "MainThread", (Frame("SimpleQueue.get", "multiprocessing/queues.py", 364),)), "")
    assert bare.match_thread(ThreadDump("1", "MainThread", (Frame("get", "multiprocessing/queues.py", 364),)), "")
    assert not bare.match_thread(ThreadDump("1", "MainThread", (Frame("SimpleQueue.get_nowait", "multiprocessing/queues.py", 1),)), "")
    assert not strict.match_thread(ThreadDump("1", "MainThread", (Frame("Condition.wait", "threading.py", 320),)), "")
    assert not bare.match_thread(ThreadDump("1", "MainThread", (Frame("q.get", "multiprocessing/queues.py", None, native=True),)), "")
    worker = ("Thread 14891 (idle): \"MainThread\"\n    SemLock.__enter__ (multiprocessing/synchronize.py:95)\n"
              "    SimpleQueue.get (multiprocessing/queues.py:364)\n    worker (multiprocessing/pool.py:114)\n"
              "    BaseProcess.run (multiprocessing/process.py:108)\n    BaseProcess._bootstrap (multiprocessing/process.py:314)\n"
              "    Popen._launch (multiprocessing/popen_fork.py:71)\n    <module> (train.py:9)\n")
    assert text_verdict(tmp_path, worker) == "pool-worker-idle"


def test_a_frame_pattern_may_look_at_the_n_innermost_frames(tmp_path):
    """``innermost = 2`` on a pattern: a kernel library's wrapper under torch's op dispatch
    (``__call__`` in torch/_ops.py innermost) matches; the same wrapper further out (the
    caller of a wait of its own) does not."""
    path = tmp_path / "sigs.toml"
    path.write_text('[[signature]]\nid = "kern"\ntitle = "t"\nadvice = "x"\n'
                    'frames = [{ file = "mylib/ops.py", innermost = 2 }]\n')
    (sig,) = load_signatures([path], builtin=False)
    ops, wrapper = Frame("__call__", "torch/_ops.py", 1209), Frame("rms_norm", "mylib/ops.py", 40)
    assert sig.match_thread(ThreadDump("1", "MainThread", (ops, wrapper, Frame("forward", "model.py", 3))), "")
    deep = (Frame("wait", "threading.py", 320), Frame("get", "queue.py", 171), ops, wrapper)
    assert not sig.match_thread(ThreadDump("1", "MainThread", deep), "")
