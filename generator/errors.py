"""Named failures of the colocated generator. No I/O in constructors.

Every error that involves the worker carries the worker log's path, because
that log is where the engine's own traceback is.
"""

from __future__ import annotations


class GeneratorError(RuntimeError):
    """Base class. ``log_path`` is the worker log, when there is one."""

    def __init__(self, message: str, *, log_path: str | None = None):
        self.log_path = log_path
        super().__init__(f"{message}; worker log: {log_path}" if log_path else message)


class WorkerTimeout(GeneratorError):
    """An operation did not answer before its deadline (e.g. a wedged engine)."""


class WorkerDied(GeneratorError):
    """The worker exited or closed its socket while we waited for it."""


class WorkerUnkillable(GeneratorError):
    """The worker's process group could not be confirmed dead; trainer stays on CPU."""


class AuthenticationFailed(GeneratorError):
    """The peer on the control socket does not hold the key."""


class ProtocolError(GeneratorError):
    """A malformed frame or reply."""


class WorkerError(GeneratorError):
    """The worker ran the operation and it raised; ``remote_type`` names its exception."""

    def __init__(self, message: str, *, remote_type: str = "", log_path: str | None = None):
        self.remote_type = remote_type
        super().__init__(message, log_path=log_path)


class WeightMismatch(WorkerError):
    """The engine did not load exactly the staged bytes (fingerprint or coverage)."""


class CudagraphPolicyViolation(GeneratorError):
    """The policy said cuda graphs off, but the engine's GPU worker applied a mode other than NONE."""


class UnsupportedEngineConfig(GeneratorError, ValueError):
    """Engine kwargs this generator cannot honour (e.g. tensor parallelism > 1); raised before any spawn."""


class EngineStateError(RuntimeError):
    """An engine operation that is illegal in the engine's current state (raised in the worker)."""
