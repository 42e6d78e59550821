"""Export a run's evidence bundle from the TUI: where to, signed with which key, then
what ``replay-tui export`` would say of it.

The export is ``replay_tui.evidence.export.export_bundle`` (what ``replay-tui export``
calls), run in a thread worker; its result is said with the CLI's own lines
(``describe_export``), the one piece of advice that names a flag (``--sign KEY``) said
in this form's terms.  The folder defaults to ``bundles/<run>-<time>`` beside the store;
the key to ``$REPLAY_TUI_SIGNING_KEY`` (empty: unsigned).  A replay's bundle is its
original's (the evidence is about the run a replay replays).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, Static

from replay_tui.tui.queries import open_store
from replay_tui.tui.screens.keys import VIM_BINDINGS
from replay_tui.tui.screens.result_modal import ResultModal
from replay_tui.tui.widgets.style import Palette, safe, short

if TYPE_CHECKING:
    from replay_tui.ops.evidence import ExportResult
    from storage.store import RunStore

SIGNING_KEY_ENV = "REPLAY_TUI_SIGNING_KEY"
KEY_FIELD = "signing key"
BUNDLES = "bundles"
"""The folder beside the store where the TUI's bundles go by default."""


def in_form_terms(line: str) -> str:
    """A line of ``describe_export`` with its flag advice said as this form's field."""
    from replay_tui.evidence.words import SIGN_ADVICE

    return line.replace(SIGN_ADVICE, f'(give a "{KEY_FIELD}" in the export form to sign it)')


def default_folder(store_path: Path, run_id: str) -> Path:
    """``bundles/<run>-<time>`` beside the store: a new folder for every export."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return store_path.parent / BUNDLES / f"{run_id[:13]}-{stamp}"


def default_key() -> str:
    """The signing key the form starts with: ``$REPLAY_TUI_SIGNING_KEY`` (else none)."""
    return os.environ.get(SIGNING_KEY_ENV, "")


def evidence_run(store: RunStore, run_ref: str) -> tuple[str, str | None]:
    """The run whose evidence an export of ``run_ref`` writes (a replay's original), and
    the replay asked for when it was one."""
    rid = store.resolve(run_ref)
    record = store.get_run(rid)
    if record.kind == "replay" and record.replay_of:
        return record.replay_of, rid
    return rid, None


def export_run_bundle(
    store_path: Path, run_ref: str, out: Path | None, key: Path | None
) -> ExportResult:
    """Export the evidence of ``run_ref`` (a replay's: its original's) to ``out`` (None:
    :func:`default_folder`), signed with ``key`` (None: unsigned).  In a worker thread."""
    from replay_tui.ops.evidence import export_evidence

    with open_store(store_path) as store:
        rid, _ = evidence_run(store, run_ref)
        out = out if out is not None else default_folder(store_path, rid)
        if out.parent == store_path.parent / BUNDLES:
            out.parent.mkdir(parents=True, exist_ok=True)  # the default place, made
        return export_evidence(store, rid, out, key=key).result


class ExportBundleScreen(ResultModal):
    """The export form: the output folder, the signing key, Start / Cancel; then the
    CLI's lines for what was written."""

    WORK_GROUP = "export"
    FAILED = "not exported"
    CSS_PATH = "export.tcss"
    AUTO_FOCUS = "#start"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("ctrl+s", "start", "Export", show=False),
        *VIM_BINDINGS,
    ]

    @dataclass
    class Resolved(Message):
        """The run whose evidence the form exports (a replay's original)."""

        run_id: str
        replay: str | None

    @dataclass
    class Exported(Message):
        result: ExportResult
        lines: list[str]

    def __init__(self, store_path: Path, run_id: str) -> None:
        super().__init__()
        self.store_path = store_path
        self.run_id = run_id
        self.phase = "form"
        """``form`` -> ``running`` -> ``done`` (or back to ``form`` when it failed)."""
        self.result: ExportResult | None = None
        self.lines: list[str] = []
        self._default_out = str(default_folder(store_path, run_id))

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(
                Text(f"Export the evidence bundle of {short(self.run_id, 13)}"), id="title"
            )
            yield Static("", id="target")
            with Horizontal(classes="field"):
                yield Label("output folder", classes="label")
                yield Input(
                    self._default_out, placeholder="a new or empty folder", id="out", compact=True
                )
            with Horizontal(classes="field"):
                yield Label(KEY_FIELD, classes="label")
                yield Input(
                    default_key(),
                    placeholder="none: not signed",
                    id="key",
                    compact=True,
                )
            yield Static(
                Text(
                    f"a private key (replay-tui keygen), ${SIGNING_KEY_ENV} by default;"
                    " empty: not signed"
                ),
                id="key-help",
            )
            with Horizontal(id="buttons"):
                yield Button("Start", id="start", variant="primary", compact=True)
                yield Button("Cancel", id="cancel", compact=True)
            yield from self.compose_result()

    def on_mount(self) -> None:
        self._resolve()

    @work(thread=True, exit_on_error=False, group="export")
    def _resolve(self) -> None:
        with open_store(self.store_path) as store:
            rid, replay = evidence_run(store, self.run_id)
        self.post_message(self.Resolved(rid, replay))

    def on_export_bundle_screen_resolved(self, message: Resolved) -> None:
        message.stop()
        if message.replay is None:
            return
        out = self.query_one("#out", Input)
        if out.value == self._default_out:  # not edited: the original's name
            self._default_out = out.value = str(default_folder(self.store_path, message.run_id))
        self.query_one("#target", Static).update(
            safe(
                f"{short(message.replay, 13)} is a replay: the bundle is its original's,"
                f" {message.run_id}",
                style=Palette.of(self.app).muted,
            )
        )

    # -- exporting -------------------------------------------------------------------

    @on(Input.Submitted)
    @on(Button.Pressed, "#start")
    def _start_asked(self, event: Input.Submitted | Button.Pressed) -> None:
        event.stop()
        self.action_start()

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_close()

    def action_start(self) -> None:
        if self.phase != "form":
            return
        out_text = self.required_text("#out", "name a folder for the bundle")
        if not out_text:
            return
        self.phase = "running"
        self.query_one("#start", Button).disabled = True
        self._result(safe(f"exporting the evidence bundle to {out_text}…"))
        self._export(Path(out_text).expanduser(), self.path_field("#key"))

    @work(thread=True, exclusive=True, exit_on_error=False, group="export")
    def _export(self, out: Path, key: Path | None) -> None:
        from replay_tui.evidence.words import describe_export

        result = export_run_bundle(self.store_path, self.run_id, out, key)
        self.post_message(self.Exported(result, describe_export(result, key)))

    def on_export_bundle_screen_exported(self, message: Exported) -> None:
        message.stop()
        self.phase = "done"
        self.result, self.lines = message.result, message.lines
        first = Palette.of(self.app).fg("success", bold=True)
        self.show_lines(
            (in_form_terms(line), first if i == 0 else "") for i, line in enumerate(message.lines)
        )
        self.query_one("#start", Button).display = False
        close = self.query_one("#cancel", Button)
        close.label = "Close"
        close.focus()

    def work_failed(self) -> None:
        if self.phase == "running":  # the form again, to fix the folder or the key
            self.phase = "form"
            self.query_one("#start", Button).disabled = False

    def action_close(self) -> None:
        if self.phase == "running":  # it writes under a temporary name: whole or nothing
            self.notify("exporting… the form closes once the bundle is written", timeout=3)
            return
        self.dismiss()
