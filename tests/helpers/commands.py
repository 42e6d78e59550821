"""Command lines the tests give the real CLI."""

from __future__ import annotations

RECORD_OUTPUTS = ("record", "--json", "--artifact", "out/*")
"""The start of a ``record`` whose outputs are ``out/*`` and whose summary is JSON (flags
and ``-- COMMAND`` follow)."""

RECORD_DEEP_OUTPUTS = ("record", "--json", "--artifact", "out/**")
""":data:`RECORD_OUTPUTS` with every file below ``out/``, at any depth."""
