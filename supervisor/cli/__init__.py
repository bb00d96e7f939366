"""hangwatch.cli: the top layer. It parses the command line and wires the
supervisor, the diagnostics and the capture hook together; nothing imports it."""

# This folder is installed as hangwatch.cli (pyproject.toml maps it). Imported under
# its folder's name it would be a second copy of every module in it.
if __name__ != "hangwatch.cli":  # pragma: no cover - only a wrong import reaches this
    raise ImportError(f"import hangwatch.cli, not {__name__}")
