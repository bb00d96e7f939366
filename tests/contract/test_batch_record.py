"""The kept batch's record: its content, its size cap, its atomic file, and its readers' refusals."""

from __future__ import annotations

import json
import os
import stat

import pytest

from hangwatch.contract.batch import (MAX_READ_BYTES, Batch, BatchError, InflightFile, encode, inflight_path,
                                      make_record, parse_record, read_record)


def record(prompts=None, **extra):
    return make_record(engine="fake", engine_kwargs={"seed": 0, "fake_wedge_at_seed": 7, **extra},
                       prompts=prompts if prompts is not None else ["solve: 2+2", "say hi"], n=2, seed=7,
                       sampling={"max_tokens": 6, "temperature": 1.0}, source="worker",
                       policy={"cudagraphs": "on", "enforce_eager": False},
                       applied={"cudagraph_mode": "FULL_AND_PIECEWISE"}, weights={"digest": "abc"},
                       engine_call=3, versions={"python": "3.11"}, pid=1234, wall=1.5)


def test_a_record_carries_the_request_and_the_engine_settings_back_to_a_reproduction():
    batch = Batch.from_record(parse_record(encode(record())))
    assert batch.engine == "fake" and batch.prompts == ["solve: 2+2", "say hi"]
    assert (batch.n, batch.seed, batch.sampling) == (2, 7, {"max_tokens": 6, "temperature": 1.0})
    assert batch.engine_kwargs == {"seed": 0, "fake_wedge_at_seed": 7}
    assert batch.applied == {"cudagraph_mode": "FULL_AND_PIECEWISE"} and batch.truncated is None
    assert batch.record["weights"] == {"digest": "abc"} and batch.record["engine_call"] == 3


def test_token_id_prompts_and_stop_ids_are_recorded_under_names_the_redaction_keeps():
    rec = make_record(engine="vllm", engine_kwargs={}, prompts=[{"prompt_token_ids": [1, 2, 3]}], n=1, seed=None,
                      sampling={"stop_token_ids": [0]}, source="in-process")
    text = encode(rec).decode()
    assert "token" not in text.replace("max_tokens", ""), "a TOKEN name would be blanked by the bundle's redaction"
    batch = Batch.from_record(parse_record(text))
    assert batch.prompts == [{"prompt_token_ids": [1, 2, 3]}] and batch.sampling == {"stop_token_ids": [0]}
    assert batch.seed is None


def test_a_batch_over_the_cap_keeps_the_prompts_that_fit_whole_and_says_how_many_went():
    prompts = [f"{i:04d}" + "x" * 996 for i in range(100)]  # about 100 KB
    data = encode(record(prompts), limit=20_000)
    assert len(data) <= 20_000
    kept = json.loads(data)
    assert kept["request"]["prompts"] == prompts[: len(kept["request"]["prompts"])], "a prefix, none cut"
    note = kept["truncated"]
    assert note["prompts_total"] == 100 and 10 <= note["prompts_kept"] == len(kept["request"]["prompts"]) < 20
    assert Batch.from_record(kept).truncated == note


def test_a_single_prompt_over_the_cap_is_left_out_and_the_record_cannot_be_run():
    data = encode(record(["y" * 50_000]), limit=10_000)
    assert len(data) <= 10_000
    with pytest.raises(BatchError, match="kept no prompt.*cap"):
        Batch.from_record(json.loads(data))


def test_engine_arguments_over_the_cap_are_left_out_too():
    data = encode(record(["a"], huge="z" * 50_000), limit=10_000)
    assert len(data) <= 10_000 and json.loads(data)["engine_kwargs"] == {}


def test_the_inflight_file_is_written_whole_private_and_removed_when_the_call_returns(tmp_path):
    inflight = InflightFile(tmp_path, pid=42)
    assert inflight.path == inflight_path(tmp_path, 42) == tmp_path / "inflight-42.json"
    assert inflight.write(record())
    assert stat.S_IMODE(os.stat(inflight.path).st_mode) == 0o600
    assert read_record(inflight.path)["request"]["seed"] == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inflight-42.json"], "no temporary left behind"
    inflight.write(record(["again"]))
    assert read_record(inflight.path)["request"]["prompts"] == ["again"]
    inflight.clear()
    inflight.clear()  # twice: no error
    assert list(tmp_path.iterdir()) == []


def test_the_inflight_file_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "inflight-42.json").symlink_to(victim)
    assert InflightFile(tmp_path, pid=42).write(record())
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "inflight-42.json").is_symlink()


def test_a_record_that_cannot_be_written_never_fails_the_call(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    inflight = InflightFile(blocker, pid=1)
    assert inflight.write(record()) is False and inflight.failed
    assert InflightFile(None).write(record()) is False, "outside hangwatch: nothing to write"


@pytest.mark.parametrize("content, why", [
    (b"{not json", "not valid JSON"),
    (b'{"kind": "something-else"}', "not a hangwatch batch record"),
    (b"[1, 2]", "not a hangwatch batch record"),
    (b"[" * 100_000, "not valid JSON"),
])
def test_a_corrupt_record_is_refused_with_the_reason(tmp_path, content, why):
    path = tmp_path / "inflight-1.json"
    path.write_bytes(content)
    with pytest.raises(BatchError, match=why):
        read_record(path)


def test_a_missing_oversized_or_symlinked_record_is_refused(tmp_path):
    with pytest.raises(BatchError, match="No such file"):
        read_record(tmp_path / "inflight-1.json")
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(MAX_READ_BYTES + 1)
    with pytest.raises(BatchError, match="over the"):
        read_record(big)
    good = tmp_path / "good.json"
    good.write_bytes(encode(record()))
    (tmp_path / "link.json").symlink_to(good)
    with pytest.raises(BatchError):
        read_record(tmp_path / "link.json")


@pytest.mark.parametrize("change, why", [
    ({"engine": None}, "names no engine"),
    ({"engine_kwargs": []}, "must be objects"),
    ({"request": {"prompts": "one", "n": 1}}, "list of texts"),
    ({"request": {"prompts": ["a"], "n": 0}}, "n must be a positive"),
    ({"request": {"prompts": ["a"], "n": True}}, "n must be a positive"),
    ({"request": {"prompts": ["a"], "n": 1, "seed": "7"}}, "seed must be"),
    ({"request": None}, "no request"),
])
def test_a_record_with_fields_of_the_wrong_kind_is_refused(change, why):
    with pytest.raises(BatchError, match=why):
        Batch.from_record({**record(), **change})
