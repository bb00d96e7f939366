"""Errors every layer shares."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is out of range; the message names it and the value."""
