"""The named errors of diagnostics.

``DiagnosticsError`` and its subclasses are user mistakes (a path that does not
exist, a file that does not parse, a bad signature file): the CLI prints them as
``hangwatch: error: ...`` and exits 2, without a traceback. Capture problems are
never raised: they are recorded in the bundle as data.
"""

from __future__ import annotations


class DiagnosticsError(Exception):
    """A user-facing problem; the message says what and where."""


class InputError(DiagnosticsError):
    """An input path is missing or is neither a bundle nor a py-spy dump."""


class SignatureFileError(DiagnosticsError):
    """A signature file does not parse or a signature in it is invalid."""


class BundleError(DiagnosticsError):
    """A bundle is incomplete or unreadable."""
