"""What a backend declares of its settings: each one a flag, a variable, a form field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OptionValues = Sequence[tuple[str, str]]
"""What was given of a backend's options: (name, value) pairs, values as typed."""


@dataclass(frozen=True)
class BackendOption:
    """One setting a backend takes: a command-line flag, an environment variable it
    overrides, a field of the TUI's replay form.  Values travel as strings
    (``ReplayOptions.backend_options``); the backend's ``check_options`` validates them."""

    name: str
    """The key in ``ReplayOptions.backend_options``, e.g. ``partition``."""
    flag: str
    """The command-line flag, e.g. ``--slurm-partition``."""
    help: str
    """One line for ``--help`` and the form, without the variable (added) or a full stop."""
    env: str | None = None
    """The environment variable the flag overrides, e.g. ``REPLAY_TUI_SLURM_PARTITION``."""
    type: type[str] | type[int] = str
    """How the command line reads the flag."""
    default: str | None = None
    """What applies when neither the flag nor the variable says (None: nothing, or the
    backend's own default, which the help says)."""
    choices: tuple[str, ...] | None = None
    """The values allowed, when they are few."""
    label: str | None = None
    """The form's label (default: the name, spaced)."""

    @property
    def help_text(self) -> str:
        """The flag's help: ``Slurm partition [REPLAY_TUI_SLURM_PARTITION].``"""
        return f"{self.help} [{self.env}]." if self.env else f"{self.help}."

    @property
    def field_label(self) -> str:
        return self.label or self.name.replace("_", " ")
