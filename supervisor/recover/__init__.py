"""The incident path: what happens between a verdict and the next attempt.

``incident`` (the path itself: incident, evidence, recovery level, kill, GPU
release), ``capture`` (the capture hook run within its deadline, and the early
evidence round), ``engine_level`` (the level-1 recovery: kill and restart only
the rollout engine's worker), ``fallback_capture`` (the samples-only evidence
written when the injected diagnostics capture fails). May import ``decide``,
``watch`` and ``contain``.
"""
