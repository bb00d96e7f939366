"""hangwatch.supervisor: the watchdog process, in rooms that say what each part may do.

Bottom to top (a room may import the contract, itself and the rooms named):
    decide    pure rules: detector, attempt state machine, restart, checkpoints
    watch     read-only looks at /proc and NVML
    contain   the only code that spawns and signals the tree          (watch)
    operate   status, metrics, alerts, retention                      (decide, watch)
    cohort    multi-node agreement through the store                  (decide)
    recover   the incident path and the engine-level restart          (decide, watch, contain)
    runner, config                                                    (everything)

``tests/test_layers.py`` enforces this. The supervisor never imports
diagnostics, generator, torch or vLLM: the CLI injects the diagnostics capture.
"""
