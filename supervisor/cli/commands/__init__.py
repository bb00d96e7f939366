"""The ``hangwatch`` commands, one module each: ``run``, ``status``, ``replay``, ``bundle``
(``bundle pack``), ``report``, ``doctor`` and ``reproduce``.

Each module's ``cmd_*`` handler takes the parsed arguments and returns the exit code;
``hangwatch.cli.parser`` holds their options and help, ``hangwatch.cli.main`` hands
the handlers to it and runs the chosen one.
"""
