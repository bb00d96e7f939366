"""hangwatch.generator: what runs inside the trainer's processes.

The colocated rollout engine in an isolated worker, verified weight sync, the
cuda-graph policy and the TRL/HF integration. Imports only
``hangwatch.contract`` besides itself; torch is imported by the modules that
need it, never by this package's ``__init__``.
"""
