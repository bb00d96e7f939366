"""Say at start which installed TRL / vLLM / transformers / Python is outside the supported table.

The table and the check live in ``hangwatch.contract.versions`` (``hangwatch doctor``
reads the same); this is the generator's start-time warning, named package and
what to install instead. A warning, not a refusal, as TRL's own check: a newer
release may work, and the run's journal and logs then say it was untested.
"""

from __future__ import annotations

import logging

from hangwatch.contract import versions

logger = logging.getLogger(__name__)


def warn_unsupported_versions() -> list[versions.Problem]:
    problems = versions.check(versions.installed())
    for problem in problems:
        logger.warning("unsupported %s %s: %s; fix: %s", problem.package, problem.version, problem.message,
                       problem.fix)
    return problems
