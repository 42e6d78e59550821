"""Layering and start-up cost: what each entry point may import."""

from __future__ import annotations

import json
import subprocess
import sys

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
        "import replay_tui.gaps, replay_tui.compare.verdict, replay_tui.replay.runner, "
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
        "import sys, replay_tui.app\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'docker', 'git',"
        " 'cryptography', 'safetensors', 'securesystemslib', 'pandas', 'numpy')"
        " or m.startswith(('replay_tui.replay', 'replay_tui.compare', 'replay_tui.evidence',"
        " 'replay_tui.capture', 'replay_tui.screens.replay', 'replay_tui.screens.comparison'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    out = subprocess.run(
        [sys.executable, "-c", "import storage, pandas, numpy, sqlite_utils.db as d; print(d.pd)"],
        capture_output=True,
        text=True,
        check=False,
    )
    # a later import of pandas/numpy still works (when installed); sqlite_utils has none
    assert out.stdout.strip() == "None" or "No module named 'pandas'" in out.stderr, out.stderr
