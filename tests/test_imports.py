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
