"""hangwatch.diagnostics: incident bundles, stack parsing, signatures, replay and reports.

Imports only ``hangwatch.contract`` besides itself.
"""
