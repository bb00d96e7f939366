"""hangwatch.supervisor: the watchdog process.

Pure decisions: ``detector`` (samples in, verdicts out), ``restart`` (stop
rules and backoff), ``attempt`` (the attempt lifecycle as a state machine and
the pure choices it makes), ``checkpoints``, ``config``.
Side effects, each behind a small interface: ``launcher`` (Popen), ``killer``
(signals, forwarding included), ``proctree`` and ``sampler`` (/proc),
``probes`` (NVML), ``treefile`` and ``guardian`` (protection against our own
SIGKILL). ``runner`` sequences one attempt after another.

Imports only ``hangwatch.contract``; the CLI injects the diagnostics capture.
"""
