"""Run configuration: one frozen dataclass per concern, one loader.

Sources, lowest precedence first: built-in defaults, a TOML file (``--config``
or ``HANGWATCH_CONFIG``), the command line. In the file, keys are the long
option names (``stall-window = 90``; dashes or underscores), and
``[phase-timeouts]`` is a table of phase = seconds. An unknown key is an error
that names it.
"""

from __future__ import annotations

import json
import os
import math
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hangwatch.contract import atomic
from hangwatch.contract.capped import FileTooLarge, NotRegularFile, read_capped
from hangwatch.supervisor.decide.checkpoints import DEFAULT_GLOB, DEFAULT_MARKER, CheckpointSpec
from hangwatch.contract.errors import ConfigError
from hangwatch.contract.private import check_trusted_file
from hangwatch.contract.redact import redact_argv, redact_text
from hangwatch.contract.stackdump import DEFAULT_SIGNAL as DEFAULT_STACKS_SIGNAL
from hangwatch.contract.stackdump import MODES as STACK_MODES
from hangwatch.contract.stackdump import parse_signal
from hangwatch.supervisor.decide.detector import DEFAULT_PHASE_TIMEOUTS, DetectorConfig
from hangwatch.supervisor.decide.learned_timeout import AutoTimeout
from hangwatch.supervisor.decide.restart import RestartPolicy

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class KillConfig:
    grace: float = 10.0
    kill_timeout: float = 5.0
    gpu_release_timeout: float = 60.0
    gpu_release_mib: float = 1024.0

    def __post_init__(self) -> None:
        for name in ("grace", "kill_timeout", "gpu_release_timeout"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 seconds, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class RunConfig:
    command: tuple[str, ...]
    run_dir: Path
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    kill: KillConfig = field(default_factory=KillConfig)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    checkpoint: CheckpointSpec | None = None
    resume_arg: str | None = None
    gpu_probe: str = "auto"
    capture_timeout: float = 30.0
    cudagraphs_after_stall: str = "off"
    eager_escalation: bool = True
    recovery: str = "auto"  # auto: engine-only restart when only the rollout engine is wedged; job: always the tree
    on_hang: str = "act"  # act: recover (kill, restart); observe: detect, capture, alert, journal what it would do
    engine_retry_window: float = 1800.0
    echo: bool = True
    log_max_bytes: int = 256 * 1024 * 1024
    keep_incidents: int = 50
    min_free_mb: float = 1024.0
    containment: str = "auto"  # auto | cgroup | tree (supervisor.cgroup)
    # start the next attempt's launcher ahead (supervisor.prewarm): None, the default, for launchers
    # known not to touch the GPU at import; True for any Python launcher; False never
    prewarm_launcher: bool | None = None
    prewarm_import: tuple[str, ...] = ()  # modules the warm launcher also imports ahead
    # Which Python processes dump their own stacks for the capture (contract.stackdump), and on
    # which signal: "hangwatch" (those importing hangwatch.trainer, the engine worker), "all"
    # (every one, through the start-up hook, contract.startup_hook), "off".
    in_process_stacks: str = "hangwatch"
    stacks_signal: str = DEFAULT_STACKS_SIGNAL

    def to_json(self) -> dict[str, Any]:
        restart = asdict(self.restart)
        restart.pop("rng", None)
        # For the journal, which is shown and shared (status, reports, bug reports): secrets in
        # the command or the resume template are redacted; settings.json keeps them verbatim.
        return {
            "command": redact_argv(self.command),
            "run_dir": str(self.run_dir),
            "detector": self.detector.to_json(),
            "kill": asdict(self.kill),
            "restart": restart,
            "checkpoint": (
                {"directory": str(self.checkpoint.directory), "glob": self.checkpoint.glob, "marker": self.checkpoint.marker}
                if self.checkpoint
                else None
            ),
            "resume_arg": _redacted_template(self.resume_arg),
            "gpu_probe": self.gpu_probe,
            "capture_timeout": self.capture_timeout,
            "cudagraphs_after_stall": self.cudagraphs_after_stall,
            "eager_escalation": self.eager_escalation,
            "recovery": self.recovery,
            "on_hang": self.on_hang,
            "engine_retry_window": self.engine_retry_window,
            "echo": self.echo,
            "log_max_bytes": self.log_max_bytes,
            "keep_incidents": self.keep_incidents,
            "min_free_mb": self.min_free_mb,
            "containment": self.containment,
            "prewarm_launcher": self.prewarm_launcher,
            "prewarm_import": list(self.prewarm_import),
            "in_process_stacks": self.in_process_stacks,
            "stacks_signal": self.stacks_signal,
        }


def _redacted_template(template: str | None) -> str | None:
    if template is None:
        return None
    try:
        return " ".join(redact_argv(shlex.split(template)))
    except ValueError:  # unbalanced quotes: judge it as text
        return redact_text(template)


# Settings as (key, type, default). Keys are the long option names with
# underscores; the CLI and the TOML file both feed this one table.
SETTINGS: dict[str, tuple[type, Any]] = {
    "run_dir": (str, None),
    "checkpoint_dir": (str, None),
    "checkpoint_glob": (str, DEFAULT_GLOB),
    "checkpoint_marker": (str, DEFAULT_MARKER),
    "resume_arg": (str, None),
    "gpu_probe": (str, "auto"),
    "interval": (float, 1.0),
    "gpu_busy": (float, 90.0),
    "cpu_idle": (float, 10.0),
    "stall_window": (float, 60.0),
    "progress_timeout": (float, 600.0),
    # --progress-timeout auto: learn it from the run (the fixed value covers the warm-up).
    "progress_timeout_auto": (bool, False),
    "auto_warmup_beats": (int, 20),
    "engine_step_timeout": (float, 30.0),
    "engine_wedge_window": (float, None),
    "step_timeout": (float, 0.0),
    "noise_samples": (int, 2),
    "idle_only": (bool, False),
    "phase_timeouts": (dict, None),
    "grace": (float, 10.0),
    "kill_timeout": (float, 5.0),
    "gpu_release_timeout": (float, 60.0),
    "capture_timeout": (float, 30.0),
    "max_restarts": (int, 10),
    "max_restarts_per_hour": (int, 6),
    "no_progress_restarts": (int, 3),
    "on_crash": (str, "restart"),
    "backoff": (float, 1.0),
    "backoff_max": (float, 60.0),
    "cudagraphs_after_stall": (str, "off"),
    "eager_escalation": (bool, True),
    "recovery": (str, "auto"),
    "on_hang": (str, "act"),
    "engine_retry_window": (float, 1800.0),
    "quiet": (bool, False),
    "log_max_bytes": (int, 256 * 1024 * 1024),
    "keep_incidents": (int, 50),
    "min_free_mb": (float, 1024.0),
    "containment": (str, "auto"),
    "prewarm_launcher": (bool, None),
    "prewarm_import": (list, None),
    "in_process_stacks": (str, "hangwatch"),
    "stacks_signal": (str, DEFAULT_STACKS_SIGNAL),
    # Operating unattended (OperateConfig): alerts, metrics, the no-heartbeat warning.
    "notify": (list, None),
    "notify_command": (str, None),
    "metrics_port": (str, None),
    "metrics_textfile": (str, None),
    "heartbeat_warning": (float, 300.0),
}


# A config file is a few lines, settings.json a few KiB plus the command (ARG_MAX is 2 MiB):
# anything larger is not one, and reading it whole would let /dev/zero or a sparse
# file take all memory (a FIFO would block forever: contract.capped never waits).
MAX_CONFIG_BYTES = 1 << 20
MAX_SETTINGS_BYTES = 16 << 20  # JSON escapes non-ASCII: up to 6 bytes a character

# Every wait is bounded: seconds past this overflow the OS's sleeps and timers
# (an --interval of 1e300 crashed the supervisor) or mean "never" (a backoff of
# 1e12 s); a week is beyond any sensible timeout.
MAX_SECONDS = 7 * 24 * 3600.0
MIN_INTERVAL = 0.001
SECONDS_SETTINGS = ("interval", "stall_window", "progress_timeout", "engine_step_timeout", "engine_wedge_window",
                    "step_timeout", "grace", "kill_timeout",
                    "gpu_release_timeout", "capture_timeout", "backoff", "backoff_max", "engine_retry_window",
                    "heartbeat_warning")

_KIND_WORDS = {float: "a number", int: "a whole number", bool: "true or false", str: "a string",
               list: "a list of strings", dict: "a table of phase = seconds"}


def load_file(path: Path) -> dict[str, Any]:
    try:
        # It chooses commands hangwatch runs as us (--notify-command): only if nobody else can change it.
        check_trusted_file(path, "config file", "whoever can change it chooses what hangwatch runs as you "
                           "(--notify-command, the run directory)")
        text = read_capped(path, MAX_CONFIG_BYTES).decode("utf-8")
        raw = tomllib.loads(text)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except (NotRegularFile, FileTooLarge) as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}; --config takes a TOML file of settings") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start}); save it as UTF-8 TOML") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    except ValueError as exc:  # an integer of thousands of digits: tomllib's int() refuses it
        raise ConfigError(f"config file {path}: {str(exc).split(';')[0]}; not a setting's value") from exc
    except RecursionError as exc:
        raise ConfigError(f"config file {path}: nested too deeply; not a settings file") from exc
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name == "progress_timeout" and value == "auto":  # as on the command line
            values["progress_timeout_auto"] = True
            continue
        if name not in SETTINGS:
            known = ", ".join(sorted(k.replace("_", "-") for k in SETTINGS))
            raise ConfigError(f"config file {path}: unknown key {key!r} (known keys: {known})")
        values[name] = check_value(name, value, f"config file {path}: {key}")
    return values


def check_value(name: str, value: Any, where: str) -> Any:
    """``value`` for setting ``name`` in the type SETTINGS gives it, or a ConfigError that says
    where it came from, what it is and what it must be. ``None`` stands for "not set" where
    the default is None."""
    kind, default = SETTINGS[name]
    if value is None and default is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is list and isinstance(value, str):
        value = [value]
    if kind is str and name == "metrics_port" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if name == "phase_timeouts" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value  # as the command line gives it (PHASE=SECONDS strings), saved for --resume
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if ok and kind is list:
        ok = all(isinstance(v, str) for v in value)
    if not ok:
        raise ConfigError(f"{where} must be {_KIND_WORDS[kind]}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """A value quoted in an error: short, and a token that looks like a secret is not echoed."""
    text = redact_text(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def parse_phase_timeouts(items: list[str] | Mapping[str, Any] | None) -> dict[str, float]:
    """``PHASE=SECONDS`` strings (CLI) or a table (file), over the defaults."""
    result = dict(DEFAULT_PHASE_TIMEOUTS)
    if not items:
        return result
    pairs = items.items() if isinstance(items, Mapping) else [_split_phase(i) for i in items]
    for phase, seconds in pairs:
        if isinstance(seconds, bool):  # `checkpoint = true` in a file: float(True) would be 1 s
            raise ConfigError(f"--phase-timeout {phase}={seconds!r}: seconds must be a number")
        try:
            value = float(seconds)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"--phase-timeout {phase}={seconds!r}: seconds must be a number") from exc
        if not 0 < value < math.inf:
            raise ConfigError(f"--phase-timeout {phase}={seconds!r}: seconds must be a positive, finite number")
        if value > MAX_SECONDS:
            raise ConfigError(f"--phase-timeout {phase}={seconds!r}: more than a week ({MAX_SECONDS:.0f} s); every "
                              "wait must end: give at most that")
        result[str(phase)] = value
    return result


def _split_phase(item: str) -> tuple[str, str]:
    phase, sep, seconds = item.partition("=")
    if not sep or not phase:
        raise ConfigError(f"--phase-timeout {item!r}: expected PHASE=SECONDS, e.g. --phase-timeout checkpoint=1800")
    return phase, seconds


def build(values: Mapping[str, Any], command: list[str], explicit: frozenset[str] | set[str] = frozenset()) -> RunConfig:
    """The validated config from merged setting values (every key of SETTINGS present).

    ``explicit``: the settings the user gave (command line or file), as opposed
    to defaults; an option that would be silently ignored is refused only then.
    The checks run in this order (the first problem found is the one reported).
    """
    v = dict(values)
    _check_command(command)
    _check_numbers(v)
    _check_checkpoint_names(v)
    _check_values(v)
    checkpoint = _checkpoint_spec(v)
    if v["resume_arg"] and "{checkpoint}" not in v["resume_arg"]:
        raise ConfigError(
            f"--resume-arg {v['resume_arg']!r} must contain {{checkpoint}}, e.g. '--resume_from_checkpoint={{checkpoint}}'"
        )
    _refuse_contradictions(v, explicit)
    detector = _detector_config(v)
    return RunConfig(
        command=tuple(command),
        run_dir=Path(v["run_dir"]).expanduser().resolve() if v["run_dir"] else default_run_dir(),
        detector=detector,
        kill=KillConfig(
            grace=v["grace"], kill_timeout=v["kill_timeout"], gpu_release_timeout=v["gpu_release_timeout"]
        ),
        restart=_restart_policy(v, checkpoint),
        checkpoint=checkpoint,
        resume_arg=v["resume_arg"],
        gpu_probe=v["gpu_probe"],
        capture_timeout=v["capture_timeout"],
        cudagraphs_after_stall=v["cudagraphs_after_stall"],
        eager_escalation=v["eager_escalation"],
        recovery=v.get("recovery", "auto"),
        on_hang=v.get("on_hang", "act"),  # .get: runs saved before the option resume too
        engine_retry_window=float(v.get("engine_retry_window", 1800.0)),
        echo=not v["quiet"],
        log_max_bytes=v["log_max_bytes"],
        keep_incidents=v["keep_incidents"],
        min_free_mb=v["min_free_mb"],
        containment=v.get("containment", "auto"),  # .get: runs saved before the option resume too
        prewarm_launcher=v.get("prewarm_launcher"),
        prewarm_import=_prewarm_imports(v.get("prewarm_import")),
        in_process_stacks=v.get("in_process_stacks", "hangwatch"),  # .get: runs saved before the options
        stacks_signal=v.get("stacks_signal", DEFAULT_STACKS_SIGNAL),
    )


def _check_command(command: list[str]) -> None:
    """Something to run, and a program to run it with."""
    if not command:
        raise ConfigError("no command to supervise: put it after --, e.g. hangwatch run -- python train.py")
    if not command[0].strip():
        raise ConfigError(f"the command's program is empty ({command[0]!r} right after --): give the program to run, "
                          "e.g. hangwatch run -- python train.py")


def _check_numbers(v: Mapping[str, Any]) -> None:
    """Finite, at most a week of seconds, an interval the supervisor can keep."""
    for name, (kind, _default) in SETTINGS.items():
        # inf and nan pass every "> 0" test but break every deadline computed from them.
        if kind is float and v.get(name) is not None and not math.isfinite(v[name]):
            raise ConfigError(f"--{name.replace('_', '-')} must be a finite number of seconds or percent, got {v[name]!r}")
    for name in SECONDS_SETTINGS:
        if v.get(name) is not None and v[name] > MAX_SECONDS:
            raise ConfigError(f"--{name.replace('_', '-')} {v[name]:g} is more than a week ({MAX_SECONDS:.0f} s); "
                              "every wait must end: give at most that (0 turns the timeouts off where the help says so)")
    if v.get("interval") is not None and 0 < v["interval"] < MIN_INTERVAL:
        raise ConfigError(f"--interval {v['interval']:g} is under {MIN_INTERVAL:g} s: the supervisor would spin a CPU "
                          "sampling; give at least that (the default is 1)")


def _check_values(v: Mapping[str, Any]) -> None:
    """The choices and the bounds of each setting on its own."""
    if v.get("containment", "auto") not in ("auto", "cgroup", "tree"):
        raise ConfigError(f"--containment must be auto, cgroup or tree, got {v['containment']!r}")
    if v["on_crash"] not in ("restart", "stop"):
        raise ConfigError(f"--on-crash must be restart or stop, got {v['on_crash']!r}")
    if v.get("recovery", "auto") not in ("auto", "job"):
        raise ConfigError(f"--recovery must be auto or job, got {v['recovery']!r}")
    if v.get("in_process_stacks", "hangwatch") not in STACK_MODES:
        raise ConfigError(f"--in-process-stacks must be one of {', '.join(STACK_MODES)}, got {v['in_process_stacks']!r}")
    try:
        parse_signal(str(v.get("stacks_signal", DEFAULT_STACKS_SIGNAL)))
    except ValueError as exc:
        raise ConfigError(f"--stacks-signal: {exc}") from None
    if v.get("on_hang", "act") not in ("act", "observe"):
        raise ConfigError(f"--on-hang must be act or observe, got {v['on_hang']!r}")
    for name in ("progress_timeout", "engine_step_timeout", "engine_wedge_window", "step_timeout"):
        if v.get(name) is not None and v[name] < 0:  # not silently "off": 0 is how to say that
            off = "its shortcut" if name == "engine_wedge_window" else "the rule"  # the engine step rule stays on
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 seconds (0 turns {off} off), "
                              f"got {v[name]!r}")
    if v.get("engine_retry_window") is not None and not v["engine_retry_window"] >= 0:
        raise ConfigError(f"--engine-retry-window must be >= 0 seconds, got {v['engine_retry_window']!r}")
    if v["cudagraphs_after_stall"] not in ("off", "keep"):
        raise ConfigError(f"--cudagraphs-after-stall must be off or keep, got {v['cudagraphs_after_stall']!r}")
    if v.get("auto_warmup_beats", 20) < 2:
        raise ConfigError(f"--auto-warmup-beats must be at least 2, got {v['auto_warmup_beats']!r}")
    for name in ("max_restarts", "max_restarts_per_hour", "no_progress_restarts"):
        if v[name] < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, got {v[name]!r}")
    if v["log_max_bytes"] < 4096:
        raise ConfigError(f"--log-max-bytes must be at least 4096, got {v['log_max_bytes']!r}")
    if v["keep_incidents"] < 1:
        raise ConfigError(f"--keep-incidents must be >= 1, got {v['keep_incidents']!r}")
    if v["min_free_mb"] < 0:
        raise ConfigError(f"--min-free-mb must be >= 0 (0 turns the check off), got {v['min_free_mb']!r}")
    if v["capture_timeout"] <= 0:
        raise ConfigError(f"--capture-timeout must be positive, got {v['capture_timeout']!r}")
    if v["backoff"] < 0 or v["backoff_max"] < 0:
        raise ConfigError("--backoff and --backoff-max must be >= 0 seconds")


def _checkpoint_spec(v: Mapping[str, Any]) -> CheckpointSpec | None:
    """``--checkpoint-dir`` (resolved, and its parent must exist) with its glob and marker."""
    checkpoint = None
    if v["checkpoint_dir"]:
        directory = Path(v["checkpoint_dir"]).expanduser().resolve()
        if directory.exists() and not directory.is_dir():
            raise ConfigError(f"--checkpoint-dir {v['checkpoint_dir']}: exists but is not a directory")
        if not directory.exists() and not directory.parent.is_dir():
            raise ConfigError(
                f"--checkpoint-dir {v['checkpoint_dir']}: neither it nor its parent {directory.parent} exists; "
                "create it or fix the path"
            )
        checkpoint = CheckpointSpec(directory, v["checkpoint_glob"], v["checkpoint_marker"])
    return checkpoint


def _detector_config(v: Mapping[str, Any]) -> DetectorConfig:
    """The detector's thresholds (``decide.detector``)."""
    progress = v["progress_timeout"]
    return DetectorConfig(
        interval=v["interval"],
        gpu_busy_pct=v["gpu_busy"],
        cpu_idle_pct=v["cpu_idle"],
        stall_window=v["stall_window"],
        progress_timeout=progress if progress and progress > 0 else None,
        noise_samples=v["noise_samples"],
        phase_timeouts=parse_phase_timeouts(v["phase_timeouts"]),
        idle_only=bool(v.get("idle_only", False)),  # .get: runs saved before the option resume too
        engine_step_timeout=_engine_step_timeout(v.get("engine_step_timeout", 30.0)),
        step_timeout=_engine_step_timeout(v.get("step_timeout", 0.0)),  # off unless asked (0)
        # None: a quarter of the engine step timeout; 0: off (.get: runs saved before it resume too)
        engine_wedge_window=v.get("engine_wedge_window"),
        # .get: runs saved before --progress-timeout auto resume too
        auto_progress=AutoTimeout(warmup_beats=v.get("auto_warmup_beats", 20)) if v.get("progress_timeout_auto") else None,
    )


def _restart_policy(v: Mapping[str, Any], checkpoint: CheckpointSpec | None) -> RestartPolicy:
    """When to restart, how often, after how long (``decide.restart``)."""
    return RestartPolicy(
        max_restarts=v["max_restarts"],
        max_restarts_per_hour=v["max_restarts_per_hour"],
        # Progress is measured in checkpoints; without a checkpoint dir it is unknowable.
        no_progress_limit=v["no_progress_restarts"] if checkpoint else 0,
        on_crash=v["on_crash"],
        backoff_initial=v["backoff"],
        backoff_max=v["backoff_max"],
        backoff_jitter=v["backoff"],
    )


def _check_checkpoint_names(v: Mapping[str, Any]) -> None:
    """The glob and the marker name paths inside the checkpoint directory: one that is empty,
    absolute or climbs out with ``..`` would judge (and resume from) folders elsewhere."""
    for option, value, example in (("checkpoint-glob", v.get("checkpoint_glob"), "checkpoint-*"),
                                   ("checkpoint-marker", v.get("checkpoint_marker"), "trainer_state.json")):
        if value is None:
            continue
        parts = Path(value).parts
        if not value.strip() or Path(value).is_absolute() or ".." in parts or "\0" in value:
            raise ConfigError(f"--{option} {value!r}: must be a non-empty path inside --checkpoint-dir, without "
                              f"'..' or a leading '/', e.g. --{option} '{example}'")


def _prewarm_imports(items: list[str] | None) -> tuple[str, ...]:
    """``--prewarm-import`` modules (repeatable, or comma-separated), each a dotted module name."""
    from hangwatch.supervisor.contain.prewarm import valid_module  # noqa: PLC0415  (the rule lives with its use)

    names = tuple(n.strip() for item in items or [] for n in str(item).split(",") if n.strip())
    for name in names:
        if not valid_module(name):
            raise ConfigError(f"--prewarm-import {name!r}: not a module name (e.g. --prewarm-import torch)")
    return names


def _refuse_contradictions(v: Mapping[str, Any], explicit: frozenset[str] | set[str]) -> None:
    """Options that cannot all hold: say which and why instead of silently ignoring one."""
    if v["backoff"] > v["backoff_max"]:
        default = "" if "backoff" in explicit else " (the default)"
        raise ConfigError(
            f"--backoff {v['backoff']:g}{default} is more than --backoff-max {v['backoff_max']:g}: the first wait "
            "would already exceed the cap; raise --backoff-max or lower --backoff")
    if v["resume_arg"] and not v["checkpoint_dir"]:
        raise ConfigError(
            "--resume-arg needs --checkpoint-dir: without a checkpoint directory there is no checkpoint to fill "
            "{checkpoint} with, so the argument would never be used")
    if "no_progress_restarts" in explicit and v["no_progress_restarts"] and not v["checkpoint_dir"]:
        raise ConfigError(
            f"--no-progress-restarts {v['no_progress_restarts']} needs --checkpoint-dir: progress is measured in "
            "checkpoints, so without one the rule could never fire; add --checkpoint-dir or drop the option")
    if "engine_wedge_window" in explicit and v.get("engine_wedge_window") and not v.get("engine_step_timeout"):
        raise ConfigError(
            f"--engine-wedge-window {v['engine_wedge_window']:g} needs the engine step rule, which "
            "--engine-step-timeout 0 turns off: the wedge window is that rule, sooner; give the rule a timeout "
            "or drop the option")
    if "prewarm_import" in explicit and v.get("prewarm_import") and v.get("prewarm_launcher") is False:
        raise ConfigError(
            "--prewarm-import needs the warm launcher: the modules are imported by it, which "
            "--no-prewarm-launcher turns off; drop one of the two options")


@dataclass(frozen=True)
class OperateConfig:
    """What running unattended adds: alerts, metrics, the no-heartbeat warning.

    Kept out of ``RunConfig`` on purpose: ``RunConfig.to_json`` goes into the
    journal, and notify URLs carry secrets (webhook tokens).
    """

    notify_urls: tuple[str, ...] = ()
    notify_command: str | None = None
    metrics_port: tuple[str, int] | None = None  # (host, port)
    metrics_textfile: Path | None = None
    heartbeat_warning: float | None = 300.0  # None: no warning


def build_operate(values: Mapping[str, Any]) -> OperateConfig:
    urls = values.get("notify") or []
    if not isinstance(urls, (list, tuple)) or not all(isinstance(u, str) and u.strip() for u in urls):
        raise ConfigError("--notify takes an apprise URL, e.g. --notify 'ntfy://my-topic' (repeatable)")
    for url in urls:
        if "://" not in url:
            raise ConfigError(f"--notify {url.split(':')[0]!r}...: not an apprise URL (SCHEME://...), "
                              "e.g. slack://..., ntfy://topic, json://host:port/path")
    for name in ("notify_command", "metrics_port", "metrics_textfile"):
        if isinstance(values.get(name), str) and not values[name].strip():
            # `--metrics-port "$PORT"` with PORT unset: an empty value turned the option off unsaid.
            raise ConfigError(f"--{name.replace('_', '-')} was given an empty value; give one, or leave the option out")
    port = None
    raw = values.get("metrics_port")
    if raw:
        host, sep, number = str(raw).rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # [::1]:9464, as URLs write an IPv6 address
        try:
            port = (host if sep else "", int(number))
        except ValueError:
            raise ConfigError(f"--metrics-port {raw!r}: expected PORT or HOST:PORT, e.g. 9464 or 127.0.0.1:9464") from None
        if not 0 <= port[1] <= 65535:
            raise ConfigError(f"--metrics-port {raw!r}: port must be 0-65535")
    textfile = None
    if values.get("metrics_textfile"):
        given = Path(values["metrics_textfile"]).expanduser()
        textfile = given.absolute().parent.resolve() / given.name  # the name itself is never resolved
        if not textfile.parent.is_dir():
            raise ConfigError(f"--metrics-textfile {values['metrics_textfile']}: directory {textfile.parent} does not exist")
        if textfile.is_symlink():
            # Resolved, root's metrics replaced the file it points to (any file: a planted link).
            raise ConfigError(f"--metrics-textfile {values['metrics_textfile']}: is a symbolic link; give the path "
                              "of the file itself (hangwatch replaces it at each write)")
        if textfile.exists() and not textfile.is_file():
            raise ConfigError(f"--metrics-textfile {values['metrics_textfile']}: exists and is not a regular file")
    warn = values.get("heartbeat_warning")
    if warn is not None and (not math.isfinite(warn) or warn < 0):
        raise ConfigError(f"--heartbeat-warning must be a finite number of seconds >= 0 (0 disables), got {warn!r}")
    return OperateConfig(
        notify_urls=tuple(urls),
        notify_command=values.get("notify_command") or None,
        metrics_port=port,
        metrics_textfile=textfile,
        heartbeat_warning=warn if warn else None,
    )


def default_run_dir() -> Path:
    import time  # noqa: PLC0415

    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path.cwd() / "hangwatch-runs"
    candidate = base / stamp
    n = 1
    while candidate.exists():
        n += 1
        candidate = base / f"{stamp}-{n}"
    return candidate


def saved_values(run_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """The setting values and command a run was started with (for --resume).

    Every value is checked as a config file's would be; a setting the file lacks
    (a run saved before the option existed) gets its default, one this version
    does not know is dropped."""
    path = run_dir / "settings.json"
    try:
        data = json.loads(read_capped(path, MAX_SETTINGS_BYTES, follow_symlinks=False))
    except FileNotFoundError as exc:
        raise ConfigError(f"--resume {run_dir}: not a hangwatch run directory (no settings.json)") from exc
    except OSError as exc:
        raise ConfigError(f"--resume {run_dir}: cannot read {path}: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"--resume {run_dir}: cannot read {path}: not JSON ({str(exc)[:120]})") from exc
    values, command = data.get("values") if isinstance(data, dict) else None, data.get("command") if isinstance(data, dict) else None
    if not isinstance(values, dict) or not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise ConfigError(f"--resume {run_dir}: {path} is not what hangwatch writes (needs values: an object, "
                          "command: a list of strings); start a new run with a new --run-dir")
    checked = {k: v[1] for k, v in SETTINGS.items()}
    for name, value in values.items():
        if name in SETTINGS:
            checked[name] = check_value(name, value, f"--resume {run_dir}: {path}: {name}")
    return checked, list(command)


def save_values(run_dir: Path, values: Mapping[str, Any], command: list[str], cwd: str | None = None) -> None:
    """Written 0600: the command is kept verbatim (a resume must relaunch exactly it),
    unlike the journal and logs, where secrets in it are redacted. ``cwd``: where the run
    was started, so that a resume runs its command and relative paths there too."""
    payload = json.dumps({"values": dict(values), "command": command, **({"cwd": cwd} if cwd else {})},
                         indent=2).encode()
    atomic.write_file(run_dir / "settings.json", payload, mode=0o600)


def saved_cwd(run_dir: Path) -> str | None:
    """The working directory a run was started in (None for a run saved before it was kept)."""
    try:
        data = json.loads(read_capped(run_dir / "settings.json", MAX_SETTINGS_BYTES, follow_symlinks=False))
    except (OSError, ValueError, RecursionError):
        return None  # saved_values has said what is wrong with the file
    cwd = data.get("cwd") if isinstance(data, dict) else None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None


def _engine_step_timeout(value: Any) -> float | None:
    """0 turns the engine step rule off, like --progress-timeout 0 (build refuses a negative)."""
    return float(value) if value and value > 0 else None
