"""structlog configuration for the CLI: JSON lines into the run directory,
readable lines on the terminal. Library modules only call ``structlog.get_logger``.

Tracebacks: an event logged with ``exc_info`` (``log.exception``) puts the
full traceback, plain and without local variables, into the log file only; the
console gets one line that says where the traceback is. Local variables are
never rendered anywhere: they hold the trainer's environment (tokens, keys),
which structlog's default rich renderer would print in clear.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, TextIO

import structlog

from hangwatch.contract.private import open_private
from hangwatch.contract.redact import redact_text
from hangwatch.contract.terminal import terminal_safe

#: the file ``configure`` sends the log to, if any (where an internal error's traceback goes)
log_path: Path | None = None


def format_traceback(exc: BaseException) -> str:
    """The plain traceback (no local variables), with secrets in messages redacted."""
    return redact_text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


class _Tee:
    """Final processor: write the event as JSON to the file, render it for the console."""

    def __init__(self, file: TextIO | None, console: Any, path: Path | None) -> None:
        self.file = file
        self.console = console
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, logger: Any, method: str, event_dict: dict[str, Any]) -> str:
        trace = _pop_traceback(event_dict)
        if self.file is not None:
            record = dict(event_dict, exception=trace) if trace else event_dict
            with self.lock:
                try:
                    self.file.write(json.dumps(record, default=str) + "\n")
                    self.file.flush()
                except (OSError, ValueError):
                    pass  # a full disk must not stop supervision
        message = event_dict.pop("message", None)
        if message:
            event_dict["event"] = f"{event_dict.get('event')}: {message}"
        if trace:
            where = f"traceback in {self.path}" if self.file is not None else trace.strip().splitlines()[-1]
            event_dict["event"] = f"{event_dict.get('event')} ({where})"
        return self.console(logger, method, _console_safe(event_dict))


def _console_safe(event_dict: dict[str, Any]) -> dict[str, Any]:
    """Messages quote what the trainer's user chose (a checkpoint folder's name, a process
    name, a phase): on the terminal its control characters, newlines included (a forged
    log line), are shown escaped, never obeyed, even under ``--quiet``."""
    return {k: terminal_safe(v).replace("\n", "\\n") if isinstance(v, str) else v for k, v in event_dict.items()}


class _Console:
    """The terminal side of the log. A console that went away (the reader of a pipe
    exited: ``hangwatch run ... | tee x`` with tee killed, ``| head``) ends the echo,
    never the run: a write that raises would reach the supervisor's loop as an
    internal error and kill a healthy trainer. The log file keeps everything."""

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._lock = threading.Lock()
        self.gone = False

    def msg(self, message: str) -> None:
        with self._lock:
            if self.gone:
                return
            try:
                print(message, file=self._file, flush=True)
            except (OSError, ValueError):  # EPIPE, EIO (a closed terminal), a closed file
                self.gone = True

    log = debug = info = warn = warning = error = err = critical = exception = fatal = failure = msg


def _pop_traceback(event_dict: dict[str, Any]) -> str | None:
    exc_info = event_dict.pop("exc_info", None)
    event_dict.pop("exception", None)
    if not exc_info:
        return None
    if exc_info is True:
        exc_info = sys.exc_info()
    if isinstance(exc_info, BaseException):
        exc = exc_info
    elif isinstance(exc_info, tuple) and len(exc_info) == 3 and exc_info[1] is not None:
        exc = exc_info[1]
    else:
        return None
    return format_traceback(exc)


def _open_log(path: Path) -> TextIO:
    """Append, never through a symlink, 0600 whatever the umask (see contract.private)."""
    return os.fdopen(open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8")


def configure(log_file: Path | None = None, *, verbose: bool = False) -> None:
    global log_path
    handle = _open_log(log_file) if log_file else None
    log_path = log_file
    # plain_traceback: should an exception ever reach the renderer, no locals (the
    # default rich formatter shows them); _Tee takes exc_info out before it anyway.
    console = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event_to=0,
                                            exception_formatter=structlog.dev.plain_traceback)
    console_out = _Console(sys.stderr)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _Tee(handle, console, log_file),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(10 if verbose else 20),
        logger_factory=lambda *_args: console_out,
        cache_logger_on_first_use=False,
    )


def record_internal_error(exc: BaseException) -> Path | None:
    """Write ``exc``'s traceback where a person will look, and return that path.

    Into the run's ``hangwatch.log`` once ``configure`` has run; before that (or
    for commands without a run directory) into a private file in the temporary
    directory. None if neither can be written.
    """
    text = format_traceback(exc)
    if log_path is not None:
        try:
            with _open_log(log_path) as handle:
                handle.write(json.dumps({"event": "internal_error", "level": "error",
                                         "message": redact_text(str(exc)), "exception": text}) + "\n")
            return log_path
        except OSError:
            pass
    try:
        fd, name = tempfile.mkstemp(prefix="hangwatch-error-", suffix=".log")  # 0600
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return Path(name)
    except OSError:
        return None
