"""The replay options form: the backend, the chosen backend's own options, a timeout, and
whether a GPU-recorded run may run on CPU.

One widget for every screen that starts replays (replay, drill, bisect).  The backend
choices come from the backend registry; each backend's own options (the
``BackendOption``s it declares: the command line's ``--slurm-*`` flags) are fields shown
while that backend is chosen.  A field left empty is not given: the backend's
environment variable, else its default, applies (the placeholder says which).  A screen
adds its own fields after the backend's (``fields``) and its own check boxes after
allow-CPU (``checks``), so the form reads top down: where, how, then the gaps allowed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select

from replay_tui.errors import BadInput
from replay_tui.replay.backends import (
    BackendOption,
    backend_choices,
    backend_names,
    declared_options,
    get_backend,
)
from replay_tui.replay.plan import ReplayOptions
from replay_tui.tui.widgets.style import choices


def field(label: str, widget: Widget) -> Horizontal:
    """One labelled row of a form."""
    return Horizontal(Label(label, classes="label"), widget, classes="field")


def field_id(backend: str, option: BackendOption) -> str:
    """The id of the input of ``backend``'s ``option`` (``opt-slurm-partition``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"opt-{backend}-{option.name}")


def placeholder(option: BackendOption) -> str:
    """What applies when the field is left empty: the variable's value, the default, or
    nothing."""
    value = os.environ.get(option.env) if option.env else None
    if value:
        return f"{value} (from {option.env})"
    if option.default is not None:
        return option.default
    return f"none (or {option.env})" if option.env else "none"


class ReplayOptionsForm(Vertical):
    """Backend, its options, ``fields``, timeout, allow-CPU, ``checks``; :meth:`chosen`
    reads them into a ``ReplayOptions``, :meth:`problem` says what the backend refuses."""

    DEFAULT_CSS = """
    ReplayOptionsForm { height: auto; }
    ReplayOptionsForm .field { height: 1; margin-bottom: 1; }
    ReplayOptionsForm .label { width: 24; color: $text-muted; }
    ReplayOptionsForm #backend, ReplayOptionsForm .backend-option Input,
    ReplayOptionsForm .backend-option Select { width: 1fr; max-width: 60; }
    ReplayOptionsForm #timeout { width: 22; }
    ReplayOptionsForm Checkbox { margin-bottom: 0; }
    """

    def __init__(
        self,
        options: ReplayOptions,
        *,
        fields: Sequence[Widget] = (),
        checks: Sequence[Widget] = (),
        timeout_label: str = "timeout (s)",
        allow_cpu_label: str = "allow a CPU run of a GPU-recorded run (a gap)",
        id: str | None = "replay-options",
    ) -> None:
        super().__init__(id=id)
        self.base = options
        self.extra_fields = list(fields)
        self.extra_checks = list(checks)
        self.timeout_label = timeout_label
        self.allow_cpu_label = allow_cpu_label
        self.declared = declared_options()
        """Each backend's options, by backend name."""

    def compose(self) -> ComposeResult:
        given = dict(self.base.backend_options)
        yield field(
            "backend",
            Select(
                choices(backend_choices()),
                id="backend",
                value=self.base.backend,
                allow_blank=False,
                compact=True,
            ),
        )
        for backend, declared in self.declared.items():
            for option in declared:
                value = given.get(option.name, "") if backend == self.base.backend else ""
                row = field(option.field_label, self._input(backend, option, value))
                row.add_class("backend-option", f"backend-{backend}")
                row.tooltip = option.help_text
                yield row
        yield from self.extra_fields
        timeout = self.base.timeout_s
        yield field(
            self.timeout_label,
            Input(
                "" if timeout is None else f"{timeout:g}",
                id="timeout",
                type="number",
                placeholder="none",
                compact=True,
            ),
        )
        yield Checkbox(self.allow_cpu_label, self.base.allow_cpu, id="allow-cpu", compact=True)
        yield from self.extra_checks

    def _input(self, backend: str, option: BackendOption, value: str) -> Widget:
        if option.choices:
            return Select(
                [(c, c) for c in option.choices],
                id=field_id(backend, option),
                value=value if value in option.choices else Select.NULL,
                prompt=placeholder(option),
                compact=True,
            )
        return Input(
            value,
            id=field_id(backend, option),
            type="integer" if option.type is int else "text",
            placeholder=placeholder(option),
            compact=True,
        )

    def on_mount(self) -> None:
        self._show_options_of(self.backend)

    @on(Select.Changed, "#backend")
    def _backend_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._show_options_of(self.backend)

    def _show_options_of(self, backend: str) -> None:
        for name in self.declared:
            for row in self.query(f".backend-{name}"):
                row.display = name == backend

    @property
    def backend(self) -> str:
        value = self.query_one("#backend", Select).value
        return value if isinstance(value, str) and value in backend_names() else self.base.backend

    def backend_values(self) -> tuple[tuple[str, str], ...]:
        """The chosen backend's options the form gives (a field left empty gives none)."""
        backend = self.backend
        values: list[tuple[str, str]] = []
        for option in self.declared.get(backend, ()):
            widget = self.query_one(f"#{field_id(backend, option)}")
            text = widget.value if isinstance(widget, (Input, Select)) else None
            if isinstance(text, str) and text.strip():
                values.append((option.name, text.strip()))
        return tuple(values)

    def chosen(self, base: ReplayOptions | None = None) -> ReplayOptions:
        """``base`` (the options the form opened with) with what the form says."""
        timeout_text = self.query_one("#timeout", Input).value.strip()
        try:
            timeout = float(timeout_text) if timeout_text else None
        except ValueError:
            timeout = None
        return replace(
            self.base if base is None else base,
            backend=self.backend,
            backend_options=self.backend_values(),
            allow_cpu=self.query_one("#allow-cpu", Checkbox).value,
            timeout_s=timeout if timeout and timeout > 0 else None,
        )

    def problem(self, options: ReplayOptions) -> str | None:
        """What the chosen backend refuses of its options (given here or in its
        environment variables), or None."""
        try:
            get_backend(options.backend).check_options(options.backend_options)
        except BadInput as e:
            return e.message + (f" ({e.hint})" if e.hint else "")
        return None
