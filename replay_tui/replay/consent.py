"""Consent before a foreign run's command runs on this host.

A backend that does not pin and sandbox the environment (``local``) runs the recorded
argv as a child of this process, with the user's files and credentials.  For a run this
host recorded, that is the user's own command.  For a run that entered the store through
``ingest`` or an importer, it is whatever the manifest says: ``bash -c ...`` disguised by
escape sequences, or ``python3 train.py`` with an environment that runs other code.  So
such a run is refused unless the user passes :data:`FLAG`, whatever host or user the
manifest claims (those fields are forgeable; the origin is written by the store at
ingest time into the run's row and the ledger event that records its manifest, see
``storage.integrity``).  A run counts as recorded here only on positive proof: one whose
origin cannot be proven (its record cut from the ledger, its row edited) is refused the
same way, with what to check.  Drills never pass the flag.
"""

from __future__ import annotations

from replay_tui.errors import BadInput
from replay_tui.safety import escape_control
from storage import integrity
from storage.manifest import RunManifest
from storage.store import RunStore

FLAG = "--allow-foreign-on-host"


def run_origin(store: RunStore, run_id: str) -> str:
    """``local`` (proven), how the run came in (``ingest``, ``import:mlflow``...), or
    ``unproven``."""
    return integrity.run_origin(store.conn, run_id)


def local_consent_problem(store: RunStore, run_id: str) -> str | None:
    """Why ``run_id`` may not run on this host without consent, or None when it may."""
    found = integrity.origin_of(store.conn, run_id)
    if found.local:
        return None
    try:
        argv = store.manifest(run_id).argv
    except Exception:
        argv = []
    shown = escape_control(" ".join(argv))[:300]
    unsandboxed = (
        f"the local backend would run its command on this host without a sandbox (command: {shown})"
    )
    if found.origin == integrity.UNPROVEN:
        return (
            f"the origin of run {run_id} could not be proven: {found.why}, so nothing shows"
            f" it was recorded on this host; {unsandboxed}. Check the store with"
            " `replay-tui verify-store --anchor SEQ:HASH` (a ledger head noted down earlier:"
            " drill reports and bundles carry one)"
        )
    return (
        f"run {run_id} came into this store through {escape_control(found.origin)}, not from"
        f" a recording on this host: {unsandboxed}"
    )


def check_local_consent(store: RunStore, m: RunManifest, *, sandboxed: bool, allowed: bool) -> None:
    """BadInput (exit 2) when ``m`` came from elsewhere, runs unsandboxed and ``allowed`` is
    not set; the message shows the real command, control characters escaped."""
    if sandboxed or allowed:
        return
    problem = local_consent_problem(store, m.run_id)
    if problem is None and m.replay_of:
        problem = local_consent_problem(store, m.replay_of)
    if problem is not None:
        raise BadInput(
            problem,
            f"replay it with --backend docker (sandboxed), or pass {FLAG} once you have read"
            " the command and trust it",
        )
