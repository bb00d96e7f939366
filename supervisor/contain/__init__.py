"""The only code that starts and signals the supervised tree.

``launcher`` (Popen into a new process group), ``killer`` (TERM, grace, KILL
over the whole tree, escaped sessions included), ``tree_ops`` (the runner's one
interface to all of it, and its real implementation), ``members_file``
(``tree.json`` for ``--resume`` after our own SIGKILL), ``guardian`` (the
supervisor's side of the process that kills the tree if the supervisor dies),
``guardian_process`` (that process itself), ``left_behind`` (what ``--resume`` kills
of a dead supervisor's tree), ``cgroup`` (containment
by cgroup v2 where the host allows it), ``prewarm``/``warmstart`` (a launcher
imported ahead of the next attempt). May import ``watch``; never ``decide``.
"""
