"""Each word once: verdicts, replay statuses and how exit codes add up.

These are the words the store keeps (a replay fact's ``status``, a run's
``last_verdict``) and every layer above reads (``replay_tui.verdicts`` re-exports them
with the rules that work on them).  Nothing else spells a verdict set, a status set or an
exit-code precedence.

**Verdicts** judge a comparison of two runs:

- ``IDENTICAL``: bit for bit.
- ``EQUIVALENT``: not bit-identical, within the comparison's fixed tolerance.
- ``WITHIN_NOISE``: beyond the tolerance, but within the measured noise of the run's own
  replicas (a stored noise floor): reproduced within this run's noise; not bit-identical.
- ``DIVERGED``: beyond the tolerance *and* beyond the noise, or beyond the tolerance
  with no noise measured.
- ``INCOMPLETE``: something needed to judge is missing, or a run did not succeed.

The first three are *reproduced* (exit 0); only ``IDENTICAL`` is *bit-identical*.  A run
with no verdict yet is ``not-replayed`` (:data:`NOT_REPLAYED`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, Literal

# -- verdicts -----------------------------------------------------------------------------

Verdict = Literal["IDENTICAL", "EQUIVALENT", "WITHIN_NOISE", "DIVERGED", "INCOMPLETE"]
IDENTICAL: Final = "IDENTICAL"
EQUIVALENT: Final = "EQUIVALENT"
WITHIN_NOISE: Final = "WITHIN_NOISE"
DIVERGED: Final = "DIVERGED"
INCOMPLETE: Final = "INCOMPLETE"
VERDICTS: Final[tuple[Verdict, ...]] = (IDENTICAL, EQUIVALENT, WITHIN_NOISE, DIVERGED, INCOMPLETE)
REPRODUCED: Final[tuple[Verdict, ...]] = (IDENTICAL, EQUIVALENT, WITHIN_NOISE)
NOT_REPRODUCED: Final[tuple[Verdict, ...]] = (DIVERGED, INCOMPLETE)
BIT_IDENTICAL: Final[tuple[Verdict, ...]] = (IDENTICAL,)
SEVERITY: Final[dict[str, int]] = {
    IDENTICAL: 0,
    EQUIVALENT: 1,
    WITHIN_NOISE: 2,
    INCOMPLETE: 3,
    DIVERGED: 4,
}
"""Worse is larger: a sort by verdict severity puts DIVERGED last (first, descending)."""

MEANING: Final[dict[str, str]] = {
    IDENTICAL: "reproduced bit for bit: every artifact's sha256 and every metric are equal",
    EQUIVALENT: "reproduced within tolerance; not bit-identical",
    WITHIN_NOISE: "reproduced within this run's noise; not bit-identical",
    DIVERGED: "not reproduced: beyond the tolerance and beyond this run's measured noise",
    INCOMPLETE: "not judged: a run failed, or something needed to compare is missing",
}
"""What each verdict means, in the words every screen, report and command uses."""

DIVERGED_NO_FLOOR: Final = "not reproduced: beyond the tolerance, and no noise floor measured"
"""DIVERGED's meaning when there was no noise to judge against."""

NOT_REPLAYED: Final = "not-replayed"
"""The one word for a run with no verdict: never replayed, or none of its replays
completed and was judged (its ``last_verdict`` is NULL).  The CLI's filter takes it
(``runs --verdict not-replayed``; ``none``, its older spelling, is still accepted) and
the TUI's verdict filter shows it; prose writes it "not replayed"."""
NO_VERDICT_QUERY: Final = "none"
"""What a ``RunQuery``'s ``verdict`` holds to find the :data:`NOT_REPLAYED` runs."""


def is_reproduced(verdict: str | None) -> bool:
    return verdict in REPRODUCED


def is_bit_identical(verdict: str | None) -> bool:
    return verdict in BIT_IDENTICAL


def verdict_exit(verdict: str | None) -> int:
    """0 reproduced, 1 not (a comparison's exit code)."""
    return 0 if is_reproduced(verdict) else 1


# -- replay statuses ----------------------------------------------------------------------

ReplayStatus = Literal["completed", "cancelled", "interrupted", "timed_out", "infra-error"]
COMPLETED: Final = "completed"
CANCELLED: Final = "cancelled"
INTERRUPTED: Final = "interrupted"
TIMED_OUT: Final = "timed_out"
INFRA_ERROR: Final = "infra-error"
STATUSES: Final = (COMPLETED, CANCELLED, INTERRUPTED, TIMED_OUT, INFRA_ERROR)
ABORTED: Final = (CANCELLED, INTERRUPTED, TIMED_OUT, INFRA_ERROR)

LEGACY_STATUS: Final[dict[str, str]] = {
    "succeeded": COMPLETED,
    "failed": COMPLETED,
    "error": INFRA_ERROR,
}
"""Facts written before this vocabulary carry the command's own status."""

COMPLETED_SPELLINGS: Final[tuple[str, ...]] = (
    COMPLETED,
    *(k for k, v in LEGACY_STATUS.items() if v == COMPLETED),
)
"""Every stored spelling of a completed replay (for SQL: ``status IN (...)``)."""


def normalize_status(status: str | None) -> str:
    """A replay fact's status in this vocabulary (older facts used the command's)."""
    s = (status or "").strip().lower()
    return LEGACY_STATUS.get(s, s if s in STATUSES else INFRA_ERROR)


def sql_completed(column: str) -> str:
    """A SQL condition: ``column`` holds a completed replay's status, in any spelling."""
    words = ", ".join(f"'{w}'" for w in COMPLETED_SPELLINGS)
    return f"lower(trim({column})) IN ({words})"


# -- exit codes ---------------------------------------------------------------------------

EXIT_OK: Final = 0
EXIT_NOT_REPRODUCED: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_INFRA: Final = 3
EXIT_CANCELLED: Final = 130
EXIT_NOT_JUDGED: Final = 4
"""One replay (``replay --times 1``) of a run whose determinism was not fully on, with no
noise floor, that was not within the tolerance: neither reproduced nor not."""
EXIT_PRECEDENCE: Final[tuple[int, ...]] = (
    EXIT_NOT_REPRODUCED,
    EXIT_CANCELLED,
    EXIT_INFRA,
    EXIT_BAD_INPUT,
)
"""When several outcomes make one command's exit code, the first of these present wins:
a completed replay that did not reproduce is a fact whatever else happened; a cancel
(the user's own stop) says more than an infrastructure error; an error says more than a
success."""


def status_exit(status: str | None, verdict: str | None) -> int:
    """One replay attempt's exit code: 0 reproduced, 1 not reproduced (completed only),
    3 the machine could not run it or it timed out, 130 cancelled or interrupted."""
    s = normalize_status(status)
    if s == COMPLETED:
        return verdict_exit(verdict)
    return EXIT_CANCELLED if s in (CANCELLED, INTERRUPTED) else EXIT_INFRA


def combine_exits(codes: Iterable[int], *, empty: int = EXIT_NOT_REPRODUCED) -> int:
    """The exit code of a command made of several outcomes (replicas, drill items,
    probes), by :data:`EXIT_PRECEDENCE`; ``empty`` when there were none (nothing judged
    is never a pass)."""
    seen = set(codes)
    if not seen:
        return empty
    for code in EXIT_PRECEDENCE:
        if code in seen:
            return code
    return max(seen) if seen - {EXIT_OK} else EXIT_OK


# -- the environment policy -----------------------------------------------------------------

TRAINING_ENV_NAMES: Final[tuple[str, ...]] = (
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_ORDER",
    "CUDA_MODULE_LOADING",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "TORCH_CUDNN_V8_API_ENABLED",
    "TORCH_DETERMINISTIC",
    "REPLAY_TUI_SEED",
    "REPLAY_TUI_DETERMINISM",
    "TOKENIZERS_PARALLELISM",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "WANDB_MODE",
    "WANDB_SILENT",
    "TF_CPP_MIN_LOG_LEVEL",
)
"""Variables that change what training computes: ``record`` records each one that is
set, and a replay passes each one on (``replay_tui.replay.envpolicy``)."""

TRAINING_ENV_PREFIXES: Final[tuple[str, ...]] = (
    "NCCL_",
    "PYTORCH_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "ACCELERATE_",
    "PL_",
    "HF_",
)
"""Families ``record`` records whole (the frameworks' switches that change what is
computed: ``ACCELERATE_USE_CPU``, ``ACCELERATE_MIXED_PRECISION``, ``PL_GLOBAL_SEED``,
``NCCL_ALGO``, ``TORCH_DETERMINISTIC``...), credentials left out
(:data:`SECRET_ENV_WORDS`); a replay passes on only their members that name no plugin,
library, file or command to load (``envpolicy``'s patterns), and a local replay clears
the ones the original did not have (:func:`is_training_env`)."""

SECRET_ENV_WORDS: Final[tuple[str, ...]] = ("TOKEN", "SECRET", "PASSWORD", "KEY", "AUTH")
"""A variable of a recorded family whose name holds one of these is a credential
(``HF_TOKEN``): never recorded, never passed on."""


NAMES_A_THING_TO_LOAD: Final = (
    "PLUGIN|LIB|PATH|FILE|DIR|SOCKET|CMD|COMMAND|EXEC|PRELOAD|SCRIPT|MODULE|HOOK|TOPO|HOME"
    "|PROFILE|CACHE"
)
"""Words in a name of a recorded family that make it name a file, a folder, a library or
a command (``HF_HOME``, ``TORCHINDUCTOR_CACHE_DIR``, ``NCCL_NET_PLUGIN``): where this
host keeps things, not what training computes.  Never recorded, never passed on
(``replay_tui.replay.envpolicy``)."""


def is_training_env(name: str) -> bool:
    """Whether ``record`` records ``name`` when it is set (a training variable): one of
    the names, or a member of a family that names no credential and nothing to load."""
    if name in TRAINING_ENV_NAMES:
        return True
    if any(w in name for w in SECRET_ENV_WORDS) or re.search(NAMES_A_THING_TO_LOAD, name):
        return False
    return name.startswith(TRAINING_ENV_PREFIXES)
