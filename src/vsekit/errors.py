"""Errors shared by the core and the lab."""

from __future__ import annotations


class DatasetError(ValueError):
    """Bad or missing data: the message names the file (and line or field)."""
