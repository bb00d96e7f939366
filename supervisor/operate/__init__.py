"""How people follow a run: observers, live status, metrics, alerts, retention.

``observe`` (the observer interface the runner calls), ``livestatus``
(``status.json``), ``metrics`` (Prometheus), ``notify``/``notify_exec``
(alerts), ``evidence`` (a bundle's one-line summary), ``longrun`` (bounded
disk: retention, free space, journal rate limits). Never part of a decision;
may import ``decide`` and ``watch``.
"""
