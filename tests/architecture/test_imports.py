"""Layering and start-up cost: what each entry point may import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "textual", "docker", "safetensors", "git")


def loaded_after(statement: str) -> set[str]:
    code = (
        f"import json, sys\n{statement}\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out))


def test_cli_start_up_imports_nothing_heavy() -> None:
    assert loaded_after("import replay_tui.cli") == set()


def test_storage_is_free_of_everything_above_it() -> None:
    code = (
        "import sys, storage.store, storage.manifest, storage.ledger, storage.objects\n"
        "print(sorted(m for m in sys.modules if m.startswith('replay_tui')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert loaded_after("import storage.store") == set()


def test_domain_never_imports_textual() -> None:
    stmt = (
        "import replay_tui.gaps, replay_tui.compare.comparison, replay_tui.replay.runner, "
        "replay_tui.capture.launcher, replay_tui.sdk"
    )
    assert "textual" not in loaded_after(stmt)


def test_sdk_is_standard_library_only() -> None:
    code = (
        "import sys; before = set(sys.modules); import replay_tui.sdk\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(sorted(new - set(sys.stdlib_module_names) - {'replay_tui'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tui_start_up_loads_only_what_the_first_frame_needs() -> None:
    """The runs browser is the first frame: the other screens, the replay pipeline, the
    comparison and evidence code and their libraries load when first opened; sqlite_utils
    comes without its optional pandas/numpy."""
    code = (
        "import sys, replay_tui.tui.app\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'docker', 'git',"
        " 'cryptography', 'safetensors', 'securesystemslib', 'pandas', 'numpy')"
        " or (m.startswith(('replay_tui.replay', 'replay_tui.compare', 'replay_tui.evidence',"
        " 'replay_tui.capture', 'replay_tui.tui.screens.replay',"
        " 'replay_tui.tui.screens.comparison'))"
        # the gap rules (over manifests, storage only) are what the run detail lists
        " and m not in ('replay_tui.compare', 'replay_tui.gaps')"
        " and not m.startswith('replay_tui.gaps.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import storage; storage._import_sqlite_utils()\n"
            "import pandas, numpy, sqlite_utils.db as d; print(d.pd)",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # a later import of pandas/numpy still works (when installed); sqlite_utils has none
    assert out.stdout.strip() == "None" or "No module named 'pandas'" in out.stderr, out.stderr


def test_opening_an_up_to_date_store_imports_neither_sqlite_utils_nor_pydantic(
    tmp_path: Path,
) -> None:
    """sqlite-utils runs the migrations and pydantic builds manifests: opening a store
    with no migration pending and reading it (the TUI's first page) needs neither."""
    path = tmp_path / "store.db"
    make = f"from storage.store import RunStore; RunStore({str(path)!r}).close()"
    subprocess.run([sys.executable, "-c", make], check=True)
    code = (
        "import sys, storage.store\n"
        f"s = storage.store.RunStore({str(path)!r})\n"
        "s.list_runs(); s.count_runs(); s.find_runs('abc', 10)\n"
        "print(sorted(m for m in ('sqlite_utils', 'pydantic', 'pydantic_core')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
