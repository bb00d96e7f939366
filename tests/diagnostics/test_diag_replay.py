"""``hangwatch replay`` / ``bundle pack`` / ``report`` through the CLI entry points."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest

from diag_helpers import DATA, synthetic_bundle as _synthetic_bundle
from hangwatch.cli.main import main

TEXT_FIXTURES = ["gpu_model_runner_native.txt", "nccl_all_reduce.txt", "gdn_chunk.txt", "unknown_reward.txt"]


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.timeout(30)
def test_replay_text_and_json_dumps_with_aggregate(capsys):
    paths = [str(DATA / f) for f in TEXT_FIXTURES] + [str(DATA / "cuda_graph_real.json"), str(DATA / "cuda_graph_and_sync.txt")]
    rc, out, err = _run(capsys, "replay", "--json", *paths)
    assert rc == 0, err
    data = json.loads(out)
    got = {i["source"].rsplit("/", 1)[-1]: i for i in data["incidents"]}
    assert got["gpu_model_runner_native.txt"]["signature_id"] == "cuda-synchronize-wait"
    assert got["nccl_all_reduce.txt"]["signature_id"] == "nccl-collective-wait"
    assert got["gdn_chunk.txt"]["signature_id"] == "gated-deltanet-kernel"
    assert got["cuda_graph_real.json"]["signature_id"] == "vllm-cuda-graph-replay"
    assert got["unknown_reward.txt"]["signature_id"] is None
    assert "score_with_judge (judge.py:48)" in got["unknown_reward.txt"]["evidence"]
    for item in data["incidents"]:
        assert {"source", "signature_id", "title", "advice", "evidence"} <= set(item)
    agg = data["aggregate"]
    assert agg["incidents"] == 6
    assert agg["signatures"]["vllm-cuda-graph-replay"] == 2 and agg["signatures"]["unknown"] == 1
    assert agg["call_tree"]["count"] == 6

    rc, text, _ = _run(capsys, "replay", *paths)
    assert rc == 0
    assert "vllm-cuda-graph-replay" in text and "merged call tree" in text


def test_recurring_frames_table(capsys, tmp_path):
    src = (DATA / "gpu_model_runner_native.txt").read_text()
    for i in range(3):
        (tmp_path / f"dump{i}.txt").write_text(src.replace("48213", str(100 + i)))
    rc, out, _ = _run(capsys, "replay", *[str(tmp_path / f"dump{i}.txt") for i in range(3)], str(DATA / "nccl_all_reduce.txt"))
    assert rc == 0
    assert "cuEventSynchronize (libcuda.so.1) appears in 3 of 4 incidents" in out
    assert "training_step (trainer.py) appears in 4 of 4 incidents" in out


@pytest.mark.timeout(30)
def test_whatif_on_a_bundle(capsys, tmp_path):
    bundle = _synthetic_bundle(tmp_path)
    rc, out, _ = _run(capsys, "replay", "--json", str(bundle))
    w = json.loads(out)["incidents"][0]["whatif"]
    assert rc == 0 and w["fired"] and w["kind"] == "stall"
    assert w["onset_after_s"] == 10.0 and w["detected_after_s"] == 30.0 and w["recorded_detected_after_s"] == 30.0

    rc, out, _ = _run(capsys, "replay", "--json", "--stall-window", "100", str(bundle))
    w = json.loads(out)["incidents"][0]["whatif"]
    assert not w["fired"] and "would NOT fire" in w["summary"]

    rc, out, _ = _run(capsys, "replay", "--stall-window", "5", "--gpu-busy", "95", str(bundle))
    assert "would fire stall at +15.0 s (onset +10.0 s)" in out

    rc, out, _ = _run(capsys, "replay", "--json", "--cpu-idle", "0.1", str(bundle))
    assert not json.loads(out)["incidents"][0]["whatif"]["fired"], "CPU at 0.3 % is above a 0.1 % idle threshold"

    # A run directory stands for all its bundles.
    rc, out, _ = _run(capsys, "replay", "--json", str(tmp_path / "run"))
    assert json.loads(out)["aggregate"]["incidents"] == 1


@pytest.mark.timeout(30)
def test_bundle_pack_and_replay_of_the_archive(capsys, tmp_path):
    bundle = _synthetic_bundle(tmp_path)
    rc, out, _ = _run(capsys, "bundle", "pack", str(bundle))
    archive = bundle.with_name(bundle.name + ".tar.gz")
    assert rc == 0 and out.strip() == str(archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert f"{bundle.name}/manifest.json" in names and f"{bundle.name}/stacks/round-1/pid-4242.json" in names

    rc, out, _ = _run(capsys, "bundle", "pack", str(bundle), "-o", str(tmp_path / "x" / "out.tar.gz"))
    assert rc == 0 and (tmp_path / "x" / "out.tar.gz").is_file()

    rc, out, _ = _run(capsys, "replay", "--json", str(archive))
    item = json.loads(out)["incidents"][0]
    assert item["signature_id"] == "vllm-cuda-graph-replay" and item["frozen"] is True and item["whatif"]["fired"]


def test_samples_only_bundle_replays_without_stacks(capsys, tmp_path):
    from hangwatch.supervisor.capture import SamplesOnlyCapture  # noqa: PLC0415
    from diag_helpers import make_request  # noqa: PLC0415

    path = SamplesOnlyCapture()(make_request(tmp_path / "run", None))
    rc, out, _ = _run(capsys, "replay", "--json", str(path))
    item = json.loads(out)["incidents"][0]
    assert rc == 0 and item["signature_id"] is None and item["title"] == "no stacks" and item["whatif"]["fired"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "/no/such/dump.txt"], "/no/such/dump.txt: no such file or directory"),
        (["replay", "{tmp}/notes.txt"], "notes.txt: neither a hangwatch bundle nor a py-spy dump"),
        (["replay", "{tmp}/broken.json"], "broken.json: neither a hangwatch bundle nor a py-spy dump"),
        (["replay", "{tmp}/fake.tar.gz"], "fake.tar.gz: not a readable .tar.gz bundle"),
        (["replay", "--signatures", "{tmp}/bad.toml", str(DATA / "gdn_chunk.txt")], "bad.toml: invalid TOML: .*line 2"),
        (["replay", "--stall-window", "-3", "{bundle}"], "--stall-window must be a positive number"),
        (["bundle", "pack", "{tmp}"], "not a bundle directory"),
        (["report", "{tmp}/fake.tar.gz"], "not a readable .tar.gz bundle"),
    ],
)
def test_user_errors_exit_2_with_the_path_named(capsys, tmp_path, argv, message):
    (tmp_path / "notes.txt").write_text("just some notes\n")
    (tmp_path / "broken.json").write_text("[{\"frames\": ")
    (tmp_path / "fake.tar.gz").write_text("not gzip")
    (tmp_path / "bad.toml").write_text("[[signature]]\nid = = 3\n")
    bundle = _synthetic_bundle(tmp_path)
    argv = [a.format(tmp=tmp_path, bundle=bundle) for a in argv]
    rc, out, err = _run(capsys, *argv)
    assert rc == 2
    assert err.startswith("hangwatch: error: ")
    import re  # noqa: PLC0415

    assert re.search(message, err), err
    assert "Traceback" not in err


@pytest.mark.timeout(60)
def test_replay_as_a_subprocess_from_any_directory(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    ok = subprocess.run([sys.executable, "-m", "hangwatch.cli", "replay", str(DATA / "gdn_chunk.txt")],
                        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert ok.returncode == 0 and "gated-deltanet-kernel" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "hangwatch.cli", "replay", str(tmp_path / "missing")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert bad.returncode == 2 and "missing: no such file" in bad.stderr and "Traceback" not in bad.stderr
