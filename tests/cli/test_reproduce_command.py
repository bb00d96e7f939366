"""``hangwatch reproduce``: its refusals (one line, no traceback, the right exit code) and its exit codes."""

from __future__ import annotations

import json

import pytest

from hangwatch.cli.commands.reproduce import exit_code_for
from hangwatch.cli.main import main
from hangwatch.contract.batch import encode, make_record
from hangwatch.contract.exitcodes import (EXIT_CANNOT_REPRODUCE, EXIT_NOT_REPRODUCED, EXIT_REPRODUCED, EXIT_USAGE,
                                          REPRODUCE_EXIT_CODES)
from hangwatch.diagnostics.bundle import write_bundle
from hangwatch.generator.reproduce import RunResult


def bundle(tmp_path, batch: bytes | str | None = None, name="20260101T000000-attempt1-stall"):
    files: dict[str, bytes | str] = {"manifest.json": json.dumps({"schema": 1, "kind": "hangwatch-incident"})}
    if batch is not None:
        files["batch.json"] = batch
    return write_bundle(tmp_path / "incidents" / name, files)


def record(engine="fake", **kwargs) -> bytes:
    return encode(make_record(engine=engine, engine_kwargs=kwargs, prompts=["p"], n=1, seed=1, sampling={},
                              source="worker"))


def refused(capsys, *argv: str) -> tuple[int, str]:
    code = main(["reproduce", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_a_bundle_without_a_batch_cannot_be_reproduced_and_says_why(tmp_path, capsys):
    code, err = refused(capsys, str(bundle(tmp_path)))
    assert code == EXIT_CANNOT_REPRODUCE
    assert "has no batch.json: no engine request was in flight" in err and "(could not run)" in err


def test_a_missing_bundle_or_a_corrupt_batch_cannot_be_reproduced(tmp_path, capsys):
    code, err = refused(capsys, str(tmp_path / "nowhere"))
    assert code == EXIT_CANNOT_REPRODUCE and "no such bundle" in err
    code, err = refused(capsys, str(bundle(tmp_path, "{torn", name="b2")))
    assert code == EXIT_CANNOT_REPRODUCE and "not valid JSON" in err
    code, err = refused(capsys, str(bundle(tmp_path, record(engine="sglang"), name="b3")))
    assert code == EXIT_CANNOT_REPRODUCE and "names the engine 'sglang'" in err


def test_a_missing_model_cannot_be_reproduced(tmp_path, capsys):
    code, err = refused(capsys, str(bundle(tmp_path, record())), "--model", str(tmp_path / "no-model"))
    assert code == EXIT_CANNOT_REPRODUCE and "no-model: no such file or directory" in err
    code, err = refused(capsys, str(bundle(tmp_path, record("vllm", model="/models/gone"), name="b2")))
    assert code == EXIT_CANNOT_REPRODUCE and "the recorded model /models/gone is not on this machine" in err
    assert "--model PATH" in err
    code, err = refused(capsys, str(bundle(tmp_path, record("vllm"), name="b3")))
    assert code == EXIT_CANNOT_REPRODUCE and "records no model path" in err


@pytest.mark.parametrize("argv, why", [
    (["--policy", "graphs-maybe"], "invalid choice: 'graphs-maybe'"),
    (["--times", "0"], "'0' is not a positive whole number"),
    (["--step-timeout", "nan"], "not a positive number of seconds"),
    (["--step-timeout", "-1"], "not a positive number of seconds"),
])
def test_a_bad_option_is_a_usage_error(tmp_path, capsys, argv, why):
    with pytest.raises(SystemExit) as exit_:
        main(["reproduce", str(bundle(tmp_path, record())), *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == EXIT_USAGE and why in err and "Traceback" not in err


def runs(*outcomes: str) -> list[RunResult]:
    return [RunResult(i, outcome) for i, outcome in enumerate(outcomes, 1)]


@pytest.mark.parametrize("outcomes, code", [
    (("wedged",), EXIT_REPRODUCED),
    (("completed", "wedged", "completed"), EXIT_REPRODUCED),
    (("completed", "completed"), EXIT_NOT_REPRODUCED),
    (("failed",), EXIT_CANNOT_REPRODUCE),
    (("completed", "failed"), EXIT_CANNOT_REPRODUCE),
    ((), EXIT_CANNOT_REPRODUCE),
])
def test_the_exit_code_says_reproduced_did_not_reproduce_or_could_not_run(outcomes, code):
    assert exit_code_for(runs(*outcomes)) == code


def test_the_three_outcomes_have_three_codes_apart_from_usage_and_hangwatch_s_own_failures():
    assert len({EXIT_REPRODUCED, EXIT_NOT_REPRODUCED, EXIT_CANNOT_REPRODUCE, EXIT_USAGE, 70}) == 5
    assert set(REPRODUCE_EXIT_CODES) == {EXIT_REPRODUCED, EXIT_NOT_REPRODUCED, EXIT_CANNOT_REPRODUCE, EXIT_USAGE}


def test_the_command_line_process_never_imports_torch():
    import subprocess
    import sys

    probe = ("import sys; from hangwatch.cli import main; main.build_parser(); "
             "from hangwatch.cli.commands import reproduce; import hangwatch.generator.reproduce; "
             "print(sorted(m for m in ('torch', 'vllm', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
