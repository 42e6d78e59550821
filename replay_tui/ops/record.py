"""The record use case (``replay-tui record -- CMD``): run a command, keep its full
provenance in the store, end with the command's own exit code.

Thin on purpose: ``capture.launcher.record`` does the work; with ``options.image`` the
command runs in that container image (Docker's recorder).  The store is opened only
once the command has ended (``opener``): its modules load while the command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replay_tui.capture.launcher import RecordResult
    from replay_tui.capture.options import RecordOptions
    from storage.manifest import RunManifest
    from storage.store import RunStore


@dataclass(frozen=True, kw_only=True)
class RecordDone:
    """A command run and recorded."""

    result: RecordResult
    """What ``capture.launcher.record`` returned, for a face that prints it whole."""
    manifest: RunManifest
    run_id: str
    status: str
    """How the command ended: succeeded, failed, interrupted, timed_out."""
    log_path: Path
    refused: tuple[str, ...]
    """Outputs not taken, and why (each also a gap of the manifest)."""
    unmatched: tuple[str, ...]
    """``--artifact`` globs that matched no file (each a gap too)."""
    exit_code: int
    """The command's own exit code: what ``record`` ends with."""


def record_run(
    options: RecordOptions,
    store_path: Path,
    opener: Callable[[], RunStore],
    *,
    image: str | None = None,
    on_line: Callable[[str], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> RecordDone:
    """Run ``options.argv`` (in the container image ``image``, default ``options.image``;
    none: on this host) and store its manifest in the store at ``store_path``, opened by
    ``opener`` once the command has ended (the caller checks beforehand what would
    refuse it)."""
    from replay_tui.capture.launcher import StoreLater, record

    executor = None
    image_info = None
    image = image or options.image
    if image:
        from replay_tui.replay.backends.docker.engine import container_recorder

        executor, image_info = container_recorder(image, options)
    res = record(
        options,
        StoreLater(store_path, opener),
        executor=executor,
        on_line=on_line,
        should_cancel=should_cancel,
        image_info=image_info,
    )
    m = res.manifest
    return RecordDone(
        result=res,
        manifest=m,
        run_id=m.run_id,
        status=m.status,
        log_path=res.log_path,
        refused=tuple(res.refused),
        unmatched=tuple(res.unmatched),
        exit_code=res.exit.exit_code,
    )
