"""Multi-node: the supervisors of one job agree through a c10d store.

``node`` (membership, fingerprints, agreement rules and the ``Cohort`` a node
runs), ``link`` (how the runner consults the cohort), ``store`` and
``store_helper`` (the store, spoken to through a helper process, since the
supervisor never imports torch). May import ``decide``.
"""
