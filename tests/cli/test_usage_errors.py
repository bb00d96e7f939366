"""Bad input on the command line or in a config file: one clear error line, the right exit status."""

from __future__ import annotations

import pytest

from hangwatch.contract.exitcodes import EXIT_USAGE


pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--bogus", "--", "true"], "unrecognized arguments: --bogus"),
        (["run", "--stall-window", "5"], "no command to supervise"),
        (["run", "--gpu-busy", "150", "--", "true"], "--gpu-busy must be in (0, 100]"),
        (["run", "--stall-window", "-1", "--", "true"], "--stall-window must be a positive"),
        (["run", "--progress-timeout", "-1", "--", "true"], "--progress-timeout must be >= 0 seconds (0 turns"),
        (["run", "--checkpoint-dir", "/nonexistent/deeper/ckpt", "--", "true"], "neither it nor its parent"),
        (["run", "--gpu-probe", "magic", "--", "true"], "expected auto, nvml, none or file:PATH"),
        (["run", "--resume-arg", "--resume", "--", "true"], "must contain {checkpoint}"),
        (["run", "--phase-timeout", "checkpoint", "--", "true"], "expected PHASE=SECONDS"),
        (["run", "--", "/nonexistent/trainer"], "command not found"),
        (["status", "/nonexistent"], "not a hangwatch run directory"),
        (["run", "--no-prewarm-launcher", "--prewarm-import", "torch", "--", "true"],
         "--no-prewarm-launcher turns off"),
        (["run", "--no-prewarm-launcher", "--prewarm-launcher", "--", "true"], "not allowed with argument"),
    ],
)
@pytest.mark.slow
def test_bad_input_gets_a_clear_error(hw, args, message):
    if args[0] == "run" and "--run-dir" not in args:
        args = args[:1] + ["--run-dir", str(hw.run_dir)] + args[1:]
    result = hw.run(args, timeout=30)
    assert result.returncode == EXIT_USAGE
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_config_file_unknown_key_is_named(hw):
    cfg = hw.tmp / "hw.toml"
    cfg.write_text('stall-window = 30\nstall-windw = 5\n')
    result = hw.run(["run", "--config", str(cfg), "--", "true"], timeout=30)
    assert result.returncode == EXIT_USAGE
    assert "unknown key 'stall-windw'" in result.stderr
