"""What the supervisor looks at: the process tree (/proc), its CPU, and the GPUs (NVML).

``proctree`` (membership and CPU of the supervised tree), ``probes`` (the GPU
probe: NVML or the simulated one), ``sampler`` (one ``Sample`` per tick from
both). Read-only: nothing here signals a process. Imports only
``hangwatch.contract`` and this room.
"""
