"""structlog configuration for the CLI: JSON lines into the run directory,
readable lines on the terminal. Library modules only call ``structlog.get_logger``."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

import structlog


class _Tee:
    """Final processor: write the event as JSON to the file, render it for the console."""

    def __init__(self, file: TextIO | None, console: Any) -> None:
        self.file = file
        self.console = console
        self.lock = threading.Lock()

    def __call__(self, logger: Any, method: str, event_dict: dict[str, Any]) -> str:
        if self.file is not None:
            with self.lock:
                try:
                    self.file.write(json.dumps(event_dict, default=str) + "\n")
                    self.file.flush()
                except (OSError, ValueError):
                    pass  # a full disk must not stop supervision
        message = event_dict.pop("message", None)
        if message:
            event_dict["event"] = f"{event_dict.get('event')}: {message}"
        return self.console(logger, method, event_dict)


def configure(log_file: Path | None = None, *, verbose: bool = False) -> None:
    handle = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115 (lives for the process)
    console = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event_to=0)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _Tee(handle, console),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(10 if verbose else 20),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
