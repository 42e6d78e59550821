"""``replay_tui.deterministic`` leaves torch as ``torch.use_deterministic_algorithms``
would, without importing torch's compiler to do it.

torch's function sets its deterministic flag and ``torch._inductor.config.deterministic``,
importing that config (and the compiler behind it: ~1-2.4 s of a small CPU run).  The
SDK sets the flag and, while the config is not loaded, the variable the config reads when
it loads (``TORCHINDUCTOR_DETERMINISTIC``).  Each probe runs in a fresh interpreter (the
import cannot be undone in one); what torch's function would leave is written out: the
flag and warn-only from the last call, the config's value from the last call.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.training import cli_env

# Each probe runs in a fresh interpreter, prints one JSON line, and states what it checks.
NOT_LOADED = """\
import json, os, sys
import torch
import replay_tui.sdk as sdk
CONFIG = "torch._inductor.config"
# (calls as (on, warn_only); variable at the start) -> what torch's own function leaves:
# its flag and warn-only from the last call, the config's value from the last call.
cases = [
    ([(True, True)], None),
    ([(False, True)], None),
    ([(True, True), (False, False)], None),
    ([(False, True), (True, False)], None),
    ([(True, True), (False, True), (True, True)], None),
    ([(True, True)], "0"),
    ([(True, False)], "1"),
]
seen = []
for calls, start in cases:
    os.environ.pop("TORCHINDUCTOR_DETERMINISTIC", None)
    if start is not None:
        os.environ["TORCHINDUCTOR_DETERMINISTIC"] = start
    sdk._state["inductor_env_set"] = False
    for on, warn in calls:
        sdk.deterministic(on, warn_only=warn)
    seen.append({
        "flag": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "config_on_import": os.environ.get("TORCHINDUCTOR_DETERMINISTIC") == "1",
        "loaded": CONFIG in sys.modules,
    })
print(json.dumps(seen))
"""

# The variable set for "on" is what the config takes when it loads; once loaded, the
# config itself is set (torch's own path).
THEN_LOADED = """\
import json, sys
import torch
import replay_tui
replay_tui.deterministic(True)
loaded_by_call = "torch._inductor.config" in sys.modules
import torch._inductor.config as inductor
on = inductor.deterministic
replay_tui.deterministic(False)
print(json.dumps([loaded_by_call, on, inductor.deterministic,
                  torch.are_deterministic_algorithms_enabled()]))
"""

# Someone else's TORCHINDUCTOR_DETERMINISTIC=1 and a call for off: torch's own function.
OTHERS_VARIABLE = """\
import json, os, sys
import torch
import replay_tui
replay_tui.deterministic(False)
import torch._inductor.config as inductor
print(json.dumps([inductor.deterministic, os.environ["TORCHINDUCTOR_DETERMINISTIC"],
                  torch.are_deterministic_algorithms_enabled()]))
"""


def _probe(script: str, inductor_env: str | None = None) -> object:
    env = cli_env()
    env.pop("TORCHINDUCTOR_DETERMINISTIC", None)
    env.pop("REPLAY_TUI_DETERMINISM", None)
    if inductor_env is not None:
        env["TORCHINDUCTOR_DETERMINISTIC"] = inductor_env
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _want(flag: bool, warn_only: bool, config: bool) -> dict[str, bool]:
    return {"flag": flag, "warn_only": warn_only, "config_on_import": config, "loaded": False}


def test_calls_leave_torch_as_its_own_function_would_without_loading_the_compiler() -> None:
    assert _probe(NOT_LOADED) == [
        _want(True, True, True),
        _want(False, True, False),
        _want(False, False, False),  # the variable this module set is taken back
        _want(True, False, True),
        _want(True, True, True),
        _want(True, True, True),  # someone's "0" becomes "1", as torch's call sets True
        _want(True, False, True),  # someone's "1" already says on: left alone
    ]


def test_the_variable_is_what_the_config_takes_when_it_loads() -> None:
    # not loaded by the call; True when loaded; set to False by the next call; flag off
    assert _probe(THEN_LOADED) == [False, True, False, False]


def test_someone_elses_variable_and_a_call_for_off_go_through_torch() -> None:
    assert _probe(OTHERS_VARIABLE, inductor_env="1") == [False, "1", False]
