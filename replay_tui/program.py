"""The ``replay-tui`` program: the command line, with the TUI when no command is given.

The CLI (``replay_tui.cli``) and the TUI (``replay_tui.app``) are siblings over the
domain and never import each other; this module is the one place that joins them.
The TUI is imported only when it opens, so commands start without Textual.
"""

from __future__ import annotations

from pathlib import Path

from replay_tui.cli import main as cli_main
from replay_tui.cli.common import set_tui_opener


def _open_tui(store_path: Path, notice: str | None) -> None:
    from replay_tui.app import run_app

    run_app(store_path, notice=notice)


def main() -> None:
    set_tui_opener(_open_tui)
    cli_main()


if __name__ == "__main__":
    main()
