"""Item 7 of the third trust round (attack E1): the environment is an allow-list for
loaders too.

``--allow-env GCONV_PATH`` (and every variable that makes a runtime load code or change
its loader) is refused on the command line, exit 2 with a clear message, before anything
runs; a manifest that carries one is refused whatever ``--allow-env`` says; the list is
one list (``replay_tui.replay.envpolicy``).  The attack's end, a replayed program that
sees ``GCONV_PATH`` and has glibc load a module from it, is tried on the real engine:
nothing runs and the planted module never loads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from replay_tui.errors import BadInput
from replay_tui.replay import envpolicy
from replay_tui.replay.envpolicy import check_env, check_extra, env_allowed, is_loader
from tests.helpers.foreign import foreign_manifest, head
from tests.support.training import replay_tui

ATTACK = ("GCONV_PATH", "GLIBC_TUNABLES", "PYTHONEXECUTABLE", "NODE_OPTIONS", "PERL5LIB")
LOADERS = (
    *ATTACK,
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONPATH",
    "PERL5OPT",
    "RUBYOPT",
    "RUBYLIB",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "LD_BIND_NOW",
    "DYLD_INSERT_LIBRARIES",
    "JAVA_TOOL_OPTIONS",
    "MALLOC_CHECK_",
    "MALLOC_ARENA_MAX",
    "BASH_ENV",
    "BASH_FUNC_ls",
    "LOCPATH",
    "OPENSSL_CONF",
    "CUDA_INJECTION64_PATH",
    "GIT_CONFIG_KEY_0",
)


@pytest.mark.parametrize("name", LOADERS)
def test_every_loader_is_refused_by_the_one_list(name: str) -> None:
    assert is_loader(name) and not env_allowed(name, [name])
    with pytest.raises(BadInput, match=f"never passes {name} on.*load code"):
        check_extra([name])
    with pytest.raises(BadInput, match="makes a runtime load code"):
        check_env({name: "x"}, [])  # a manifest's name: refused without any flag too


def test_the_training_variables_still_pass() -> None:
    for name in ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS", "NCCL_ALGO"):
        assert env_allowed(name) and not is_loader(name), name
    assert check_extra(["MY_FLAG"]) == ["MY_FLAG"]
    assert check_env({"MY_FLAG": "1"}, ["MY_FLAG"]) == {"MY_FLAG": "1"}


def test_the_list_lives_in_one_place() -> None:
    # every name a replay sets itself, and the older deny-list's names, are in it
    for name in ("PATH", "HOME", "REPLAY_TUI_HANDOFF", "PYTHONINSPECT", "PROMPT_COMMAND"):
        assert name in envpolicy.LOADER_ENV, name
    assert envpolicy.NEVER_ALLOWED is envpolicy.LOADER_ENV


@pytest.mark.parametrize("name", ATTACK)
def test_allow_env_of_a_loader_is_exit_2_on_the_command_line(store: Path, name: str) -> None:
    proc = replay_tui(store, "replay", "01a20000-0000-7000-8000-000000000000", "--allow-env", name)
    assert proc.returncode == 2, proc.stderr
    assert f"--allow-env {name}: a replay never passes {name} on" in proc.stderr
    assert "makes a runtime load code or changes its loader" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not store.exists()  # refused before the store was opened


def _manifest(repo: Path, env: dict[str, str]) -> dict[str, Any]:
    digest = os.environ.get("REPLAY_TUI_TRAIN_DIGEST", "x@sha256:" + "0" * 64).split("@", 1)[1]
    return foreign_manifest(
        head(repo),
        ["python3", "-c", "import codecs; codecs.lookup('PWNED')"],
        image={
            "reference": os.environ.get("REPLAY_TUI_TRAIN_IMAGE", "localhost:5000/x:y"),
            "digest": digest,
        },
        env=env,
    )


@pytest.mark.docker
def test_a_manifest_with_gconv_path_never_runs(repo: Path, store: Path, tmp_path: Path) -> None:
    if not os.environ.get("REPLAY_TUI_TRAIN_IMAGE"):
        pytest.fail("REPLAY_TUI_TRAIN_IMAGE unset (source /var/lib/replay-tui-env/train-image.env)")
    planted = tmp_path / "gconv"
    planted.mkdir()
    (planted / "gconv-modules").write_text("module PWNED// INTERNAL pwned 1\n")
    data = _manifest(repo, {"GCONV_PATH": str(planted), "OMP_NUM_THREADS": "1"})
    f = tmp_path / "m.json"
    f.write_text(json.dumps(data))
    assert replay_tui(store, "ingest", str(f)).returncode == 0
    for extra in ((), ("--allow-env", "GCONV_PATH")):
        proc = replay_tui(store, "replay", str(data["run_id"]), "--repo", str(repo), *extra)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "GCONV_PATH" in proc.stderr and "load code" in proc.stderr
        assert "[     run]" not in proc.stderr  # refused at the plan: nothing ran
