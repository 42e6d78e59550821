"""Which environment variables a replay passes on from a manifest: an allow-list.

A manifest may come from anywhere.  A deny-list of dangerous names cannot be complete:
``PYTHONWARNINGS`` + ``BROWSER``, ``PYTHONINSPECT``, ``GCONV_PATH``, ``PERL5OPT``,
``NODE_OPTIONS``, ``PYTHONUSERBASE``, ``NCCL_NET_PLUGIN``... each runs code through an
innocent ``python3 train.py``.  So a replay passes on only the variables that change what
training computes (the ones ``record`` captures by default, minus the few of those that
load code), plus names the user adds with ``--allow-env NAME``.  Anything else stops the
replay with exit 2, naming the variable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from replay_tui.errors import BadInput
from replay_tui.safety import escape_control
from storage.vocabulary import TRAINING_ENV_NAMES, TRAINING_ENV_PREFIXES

# Exact names that change what training computes, and nothing else: the one list
# ``record`` records from too (storage.vocabulary).
ALLOWED_ENV = frozenset(TRAINING_ENV_NAMES)

# Prefix families ``record`` captures.  Only their members matching these patterns pass;
# the ones that name a plugin, library, file or command to load never do.
_ALLOWED_PATTERNS = tuple(re.compile(rf"^{p}[A-Z0-9_]+$") for p in TRAINING_ENV_PREFIXES)
_NEVER = re.compile(
    r"(PLUGIN|LIB|PATH|FILE|DIR|SOCKET|CMD|COMMAND|EXEC|PRELOAD|SCRIPT|MODULE|HOOK|TOPO|"
    r"HOME|PROFILE)"
)

# Names a user can never allow: the replay sets them itself, or they load code.
NEVER_ALLOWED = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PATH",
        "HOME",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",
        "PYTHONBREAKPOINT",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "REPLAY_TUI_HANDOFF",
    }
)

MAX_ENV_VALUE = 4096


def env_allowed(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a replay may pass ``name`` on from a manifest."""
    if name in NEVER_ALLOWED or name.startswith(("LD_", "DOCKER_")):
        return False
    if name in ALLOWED_ENV or name in set(extra):
        return True
    return any(p.match(name) for p in _ALLOWED_PATTERNS) and not _NEVER.search(name)


def check_extra(extra: Iterable[str]) -> list[str]:
    """Validate the names a user added with ``--allow-env``; BadInput for one never allowed."""
    out = []
    for name in extra:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            raise BadInput(f"--allow-env {escape_control(name)!r} is not a variable name")
        if name in NEVER_ALLOWED or name.startswith(("LD_", "DOCKER_")):
            raise BadInput(
                f"--allow-env {name}: a replay never passes {name} on from a manifest",
                "it would change what runs, not how it trains",
            )
        out.append(name)
    return out


def check_env(env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The manifest's ``env`` if every variable is allowed, else BadInput naming the first.

    ``extra``: names the user allowed on top (``--allow-env``), validated here too.
    """
    allowed_extra = check_extra(extra)
    refused = sorted(k for k in env if not env_allowed(k, allowed_extra))
    for k, v in env.items():
        if "\x00" in v:
            raise BadInput(f"manifest env {escape_control(k)} contains NUL")
        if len(v) > MAX_ENV_VALUE:
            raise BadInput(f"manifest env {escape_control(k)} is longer than {MAX_ENV_VALUE}")
    if refused:
        names = ", ".join(escape_control(k) for k in refused[:8])
        more = f" and {len(refused) - 8} more" if len(refused) > 8 else ""
        raise BadInput(
            f"manifest env sets {names}{more}, which a replay does not pass on"
            " (only variables that change what training computes are allowed)",
            "if the run needs it and you trust the manifest, pass --allow-env NAME",
        )
    return dict(env)
