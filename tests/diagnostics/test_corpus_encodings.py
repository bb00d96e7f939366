"""The corpus's verdicts hold when a paste arrives re-encoded the ways pastes travel: line
ends from Windows, terminal colours, a JSON log record, tabs, a rendered page's no-break
spaces and curly quotes, a page's source (an escaped <pre>, &nbsp; indents), zero-width
characters from a chat tool, and the other forms an installed library's path takes
(dist-packages, a conda env, Windows). Each real dump replay
names right must come out the same after each of ``reencode.MUST_HOLD``."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED
from hangwatch.diagnostics.corpus import load_corpus
from hangwatch.diagnostics.reencode import ENCODINGS, MUST_HOLD, changed, main, named_right

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def right(tmp_path_factory) -> list[tuple[str, str, str]]:
    out = named_right(load_corpus(PASTED), tmp_path_factory.mktemp("baseline"))
    assert len(out) > 300
    return out


@pytest.mark.parametrize("encoding", MUST_HOLD)
def test_every_dump_named_right_is_named_the_same_when_re_encoded(tmp_path, right, encoding):
    diff = changed(right, encoding, tmp_path)
    assert not diff, f"{encoding}: {len(diff)} verdicts changed, e.g. {diff[:5]}"


def test_every_encoding_changes_the_text():
    sample = ('Thread 1 (idle): "MainThread"\n    wait (/usr/lib/python3.11/site-packages/x/threading.py:320)\n' + "word " * 30 + "\n")
    assert all(encode(sample) != sample for encode in ENCODINGS.values())


def test_the_report_is_one_line_per_encoding(tmp_path, capsys):
    (tmp_path / "d.txt").write_text('Thread 1 (idle): "MainThread"\n    acquire (filelock/_api.py:220)\n    main (a.py:1)\n')
    (tmp_path / "d.meta").write_text("url: x\nexpected: file-lock-wait\n")
    assert main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [f"encoding={name}" for name in ENCODINGS]
    assert lines[0] == "encoding=crlf kept=1 of=1"
    assert main([str(tmp_path / "missing")]) == 2
