"""Verify an evidence bundle from the TUI: the folder, the key to trust, the result.

The check is ``replay_tui.evidence.verify.verify_bundle`` (what ``replay-tui verify``
calls), run in a thread worker: it re-hashes every file.  The key defaults as the CLI's
does: none given, the keys of the trusted-keys file (``$REPLAY_TUI_TRUSTED_KEYS``, else
``trusted-keys.pem`` in the user config folder).  The result is the CLI's
(``report_lines``), its advice said in this dialog's terms: where the CLI says which flag
to pass (``--key``, ``--allow-embedded-key``, ``--allow-unsigned``), the dialog names its
own field or checkbox (``in_dialog_terms``).  A failure to check at all (no such
folder, an unreadable key) goes to the app's error modal and is said in the result line
too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Checkbox, Input, Label, Static

from replay_tui.tui.screens.keys import VIM_BINDINGS
from replay_tui.tui.screens.result_modal import ResultModal
from replay_tui.tui.widgets.style import Palette, safe

if TYPE_CHECKING:
    from replay_tui.ops.evidence import BundleCheck, ReportLine


KEY_FIELD = "public key (.pub)"
EMBEDDED_BOX = "use the bundle's own key"
UNSIGNED_BOX = "accept an unsigned bundle"
CLI_ADVICE = (
    ("pass --key with the signer's public key", f'give the signer\'s public key in "{KEY_FIELD}"'),
    (
        "(--allow-embedded-key to check with it anyway)",
        f'(tick "{EMBEDDED_BOX}" to check with it anyway)',
    ),
    ("(--allow-unsigned to accept that)", f'(tick "{UNSIGNED_BOX}" to accept that)'),
)
"""The CLI's advice (its flags) and what this dialog says instead."""


def in_dialog_terms(text: str) -> str:
    """A result line with the CLI's flags said as the dialog's field and checkboxes."""
    for cli, dialog in CLI_ADVICE:
        text = text.replace(cli, dialog)
    return text


def newest_bundle(store_path: Path) -> Path | None:
    """The newest folder in ``bundles/`` beside the store (where the TUI exports)."""
    folder = store_path.parent / "bundles"
    try:
        found = [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return None
    return max(found, key=lambda p: (p.stat().st_mtime, p.name), default=None)


class VerifyBundleScreen(ResultModal):
    """Ask for a bundle folder (and a key), verify it, show the result."""

    WORK_GROUP = "verify"
    FAILED = "could not verify"
    CSS_PATH = "verify.tcss"
    AUTO_FOCUS = "#bundle"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("ctrl+s", "verify", "Verify", show=False),
        *VIM_BINDINGS,
    ]

    @dataclass
    class Checked(Message):
        """The worker's answer: the check and its lines in the CLI's words."""

        check: BundleCheck
        lines: list[ReportLine]

    def __init__(self, store_path: Path, bundle: Path | None = None) -> None:
        super().__init__()
        self.store_path = store_path
        self.initial = bundle if bundle is not None else newest_bundle(store_path)
        self.check: BundleCheck | None = None
        self.lines: list[ReportLine] = []

    def compose(self) -> ComposeResult:
        from replay_tui.evidence.keys import TRUSTED_KEYS_ENV, trusted_keys_path

        with Vertical(id="dialog"):
            yield Static("Verify an evidence bundle", id="title")
            with Horizontal(classes="field"):
                yield Label("bundle folder", classes="label")
                yield Input(
                    str(self.initial or ""),
                    placeholder="the folder an export wrote",
                    id="bundle",
                    compact=True,
                )
            with Horizontal(classes="field"):
                yield Label(KEY_FIELD, classes="label")
                yield Input(
                    placeholder=f"none: the keys in {trusted_keys_path()}",
                    id="key",
                    compact=True,
                )
            yield Static(
                Text(f"no key: the keys in the trusted-keys file (${TRUSTED_KEYS_ENV})"),
                id="key-help",
            )
            yield Checkbox(
                f"{EMBEDDED_BOX} (shows it intact, not who made it)",
                id="allow-embedded",
                compact=True,
            )
            yield Checkbox(UNSIGNED_BOX, id="allow-unsigned", compact=True)
            with Horizontal(id="buttons"):
                yield Button("Verify", id="verify", variant="primary", compact=True)
                yield Button("Close", id="close", compact=True)
            yield from self.compose_result()

    # -- verifying -------------------------------------------------------------------

    @on(Input.Submitted)
    @on(Button.Pressed, "#verify")
    def _verify_asked(self, event: Input.Submitted | Button.Pressed) -> None:
        event.stop()
        self.action_verify()

    def action_verify(self) -> None:
        if self.running:
            return
        bundle_text = self.required_text("#bundle", "name the bundle folder to verify")
        if not bundle_text:
            return
        self.running = True
        self.check, self.lines = None, []
        self._result(safe(f"verifying {bundle_text}…"))
        self._verify(
            Path(bundle_text).expanduser(),
            self.path_field("#key"),
            self.query_one("#allow-embedded", Checkbox).value,
            self.query_one("#allow-unsigned", Checkbox).value,
        )

    @work(thread=True, exclusive=True, exit_on_error=False, group="verify")
    def _verify(
        self, bundle: Path, key: Path | None, allow_embedded_key: bool, allow_unsigned: bool
    ) -> None:
        from replay_tui.evidence.words import report_lines
        from replay_tui.ops.evidence import verify_evidence

        check = verify_evidence(
            bundle, key, allow_embedded_key=allow_embedded_key, allow_unsigned=allow_unsigned
        ).check
        self.post_message(self.Checked(check, report_lines(check)))

    def on_verify_bundle_screen_checked(self, message: Checked) -> None:
        message.stop()
        self.running = False
        self.check, self.lines = message.check, message.lines
        palette = Palette.of(self.app)

        def style(i: int, alarm: bool) -> Style | str:
            if i == 0:
                return palette.fg("success" if message.check.ok else "error", bold=True)
            return palette.fg("error") if alarm else ""

        self.show_lines(
            (in_dialog_terms(line.text), style(i, line.alarm))
            for i, line in enumerate(message.lines)
        )
