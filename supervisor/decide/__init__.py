"""Pure decisions: samples, records and a clock in; verdicts and choices out.

``detector`` (the stall rules) and ``gpu_reading`` (what one sample's GPUs say),
``observe_only`` (when a stall that was only observed has ended), ``attempt`` (the attempt lifecycle and the
recovery level), ``restart`` (stop rules and backoff), ``checkpoints`` (which
checkpoint a resume may use), ``gpu_release`` (whether killed processes' GPU
memory is free). Nothing here signals, spawns, sleeps or reads the clock by
itself; every module imports only ``hangwatch.contract`` and this room.
"""
