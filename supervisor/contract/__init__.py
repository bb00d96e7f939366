"""hangwatch.contract: the bottom layer, dependency-free (standard library and psutil).

What every other layer agrees on: the ``HANGWATCH_*`` environment names
(``env``), the journal's events and its one reader (``journal``), process
identity (``procid``), exit codes (``exitcodes``), the verdict vocabulary
(``verdict``), samples and heartbeats, the capture hook's interface
(``capture``), atomic writes and bounded external tools. Nothing here imports
another hangwatch package.
"""

# This folder is installed as hangwatch.contract (pyproject.toml maps it). Imported under
# its folder's name it would be a second copy of every module in it.
if __name__ != "hangwatch.contract":  # pragma: no cover - only a wrong import reaches this
    raise ImportError(f"import hangwatch.contract, not {__name__}")
