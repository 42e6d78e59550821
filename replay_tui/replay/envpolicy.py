"""Which environment variables a replay passes on from a manifest: an allow-list.

A manifest may come from anywhere.  A deny-list of dangerous names cannot be complete:
``PYTHONWARNINGS`` + ``BROWSER``, ``PYTHONINSPECT``, ``GCONV_PATH``, ``PERL5OPT``,
``NODE_OPTIONS``, ``PYTHONUSERBASE``, ``NCCL_NET_PLUGIN``... each runs code through an
innocent ``python3 train.py``.  So a replay passes on only the variables that change what
training computes (the ones ``record`` captures by default, minus the few of those that
load code), plus names the user adds with ``--allow-env NAME``.  Anything else stops the
replay with exit 2, naming the variable.

The names no flag allows (:data:`LOADER_ENV`, :data:`LOADER_PREFIXES`: every variable
that makes a runtime load code or changes its loader) are listed here and only here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from replay_tui.errors import BadInput
from replay_tui.safety import escape_control
from storage.vocabulary import (
    NAMES_A_THING_TO_LOAD,
    SECRET_ENV_WORDS,
    TRAINING_ENV_NAMES,
    TRAINING_ENV_PREFIXES,
)

# Exact names that change what training computes, and nothing else: the one list
# ``record`` records from too (storage.vocabulary).
ALLOWED_ENV = frozenset(TRAINING_ENV_NAMES)

# Prefix families ``record`` captures.  Only their members matching these patterns pass;
# the ones that name a plugin, library, file or command to load never do.
_ALLOWED_PATTERNS = tuple(re.compile(rf"^{p}[A-Z0-9_]+$") for p in TRAINING_ENV_PREFIXES)
_NEVER = re.compile(f"({NAMES_A_THING_TO_LOAD})")

# Names a user can never allow: each makes a runtime load code, or changes its loader,
# or the replay sets it itself.  The one list: ``--allow-env`` refuses them (exit 2), and
# a manifest that carries one is refused whatever ``--allow-env`` says.
LOADER_ENV = frozenset(
    {
        # the dynamic loader and glibc: modules, tunables, locales, message catalogs
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "LOCPATH",
        "NLSPATH",
        "HOSTALIASES",
        "RESOLV_HOST_CONF",
        # Python
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONEXECUTABLE",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",
        "PYTHONBREAKPOINT",
        "PYTHONPLATLIBDIR",
        "PYTHONPYCACHEPREFIX",
        "PYTHONMALLOC",
        "PYTHONCASEOK",
        "PYTHONSAFEPATH",
        "PYTHONNOUSERSITE",
        # Node, Perl, Ruby, the JVM
        "NODE_OPTIONS",
        "NODE_PATH",
        "NODE_REPL_EXTERNAL_MODULE",
        "PERL5LIB",
        "PERLLIB",
        "PERL5OPT",
        "PERL5DB",
        "RUBYOPT",
        "RUBYLIB",
        "GEM_HOME",
        "GEM_PATH",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        # shells: startup files, exported functions, prompts and traces that expand
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        # libraries that load plugins named in the environment
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        "CUDA_INJECTION32_PATH",
        "CUDA_INJECTION64_PATH",
        "GIT_EXEC_PATH",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        # set by the replay itself
        "PATH",
        "HOME",
        "PYTHONDONTWRITEBYTECODE",
        "REPLAY_TUI_HANDOFF",
    }
)
LOADER_PREFIXES = (
    "LD_",  # LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...
    "DYLD_",
    "MALLOC_",  # glibc's allocator settings (tunables by another name)
    "BASH_FUNC_",  # exported shell functions: code run by every bash
    "GIT_CONFIG_",  # GIT_CONFIG_KEY_0/VALUE_0: any setting, hooks and fsmonitor included
    "DOCKER_",
)
NEVER_ALLOWED = LOADER_ENV
"""The names above (the older name of :data:`LOADER_ENV`)."""


def is_loader(name: str) -> bool:
    """Whether ``name`` makes a runtime load code or change its loader (never allowed)."""
    return name in LOADER_ENV or name.upper().startswith(LOADER_PREFIXES)


MAX_ENV_VALUE = 4096


def env_allowed(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a replay may pass ``name`` on from a manifest."""
    if is_loader(name):
        return False
    if name in ALLOWED_ENV or name in set(extra):
        return True
    if any(w in name for w in SECRET_ENV_WORDS):  # a credential (HF_TOKEN): never
        return False
    return any(p.match(name) for p in _ALLOWED_PATTERNS) and not _NEVER.search(name)


def check_extra(extra: Iterable[str]) -> list[str]:
    """Validate the names a user added with ``--allow-env``; BadInput for one never allowed."""
    out = []
    for name in extra:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            raise BadInput(f"--allow-env {escape_control(name)!r} is not a variable name")
        if is_loader(name):
            raise BadInput(
                f"--allow-env {name}: a replay never passes {name} on from a manifest: it"
                " makes a runtime load code or changes its loader",
                "it would change what runs, not how it trains; no flag allows it",
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
        loaders = [k for k in refused if is_loader(k)]
        if loaders:
            which = ", ".join(escape_control(k) for k in loaders[:8])
            raise BadInput(
                f"manifest env sets {names}{more}, which a replay does not pass on ({which}:"
                " makes a runtime load code or changes its loader)",
                "no flag allows a loader variable; remove it from the manifest if the run"
                " does not need it",
            )
        raise BadInput(
            f"manifest env sets {names}{more}, which a replay does not pass on"
            " (only variables that change what training computes are allowed)",
            "if the run needs it and you trust the manifest, pass --allow-env NAME",
        )
    return dict(env)
