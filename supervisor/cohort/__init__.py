"""Multi-node: the supervisors of one job agree through a c10d store.

``node`` (the ``Cohort`` a node runs: its lease, its stops and departures), ``join``
(one node's way in), ``incident`` (the incident's announcement, capture barrier,
agreement and restart decision), ``membership`` (who is in the cohort, the settings
fingerprint and the checks that refuse a node), ``agreement`` and ``lease`` (the pure
rules), ``records`` (the store's values, read without trusting them), ``errors``,
``launcher`` (recognising a launcher that joins the rendezvous), ``link`` (how the
runner consults the cohort), ``watched_store``, ``store`` and ``store_helper`` (the
store, spoken to through a helper process, since the supervisor never imports torch).
May import ``decide``.
"""
