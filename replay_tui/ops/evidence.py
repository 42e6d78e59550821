"""The evidence use cases: ``export``, ``verify``, ``verify-store``, ``stats``.

Thin on purpose: each calls the one domain function that does the work (``evidence``)
and returns what it amounts to, with the exit code; the faces say it in their words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from storage.vocabulary import EXIT_NOT_REPRODUCED, EXIT_OK

if TYPE_CHECKING:  # the outcomes' parts, named here for the faces' annotations too
    from replay_tui.evidence.export import ExportResult as ExportResult
    from replay_tui.evidence.modelsig import ModelFolder
    from replay_tui.evidence.stats import Stats as Stats
    from replay_tui.evidence.storecheck import StoreCheck as StoreCheck
    from replay_tui.evidence.verify import BundleCheck as BundleCheck
    from replay_tui.evidence.words import ReportLine as ReportLine
    from storage.store import RunStore

Checked = Literal["VERIFIED", "NOT_VERIFIED"]
"""A bundle or a store checked: every hash (and, for a bundle, its signature against a
trusted key) holds, or not."""


class _Judged(TypedDict):
    """A check's verdict and the exit code it makes."""

    verdict: Checked
    exit_code: int


def _checked(ok: bool) -> _Judged:
    """The verdict and exit code of a check that passed (``ok``) or found a difference."""
    if ok:
        return {"verdict": "VERIFIED", "exit_code": EXIT_OK}
    return {"verdict": "NOT_VERIFIED", "exit_code": EXIT_NOT_REPRODUCED}


@dataclass(frozen=True, kw_only=True)
class ExportDone:
    """A run's evidence bundle written (and its model files, when asked)."""

    result: ExportResult
    model_files: ModelFolder | None
    """The run's model files written beside it (``--model-files``), else None."""
    verdict: str | None
    """The replay verdict the bundle carries (None: no completed replay)."""
    exit_code: int = EXIT_OK


def export_evidence(
    store: RunStore,
    run_ref: str,
    out: Path,
    *,
    key: Path | None = None,
    replay: str | None = None,
    model_dir: Path | None = None,
) -> ExportDone:
    """Write ``run_ref``'s evidence bundle to ``out`` (signed with ``key``; the verdict of
    the replay ``replay``, default the latest completed), and with ``model_dir`` its
    model files into that new folder (checked before anything is written)."""
    from replay_tui.evidence.export import export_bundle
    from replay_tui.evidence.modelsig import export_model_files, model_target

    if model_dir is not None:
        model_dir = model_target(model_dir)
    res = export_bundle(store, run_ref, out, key_path=key, replay=replay)
    folder = None
    if model_dir is not None:
        from storage.objects import ObjectStore

        manifest = store.manifest(res.run_id)
        folder = export_model_files(ObjectStore.beside(store.path).root, manifest, model_dir)
    return ExportDone(result=res, model_files=folder, verdict=res.verdict)


@dataclass(frozen=True, kw_only=True)
class BundleVerified:
    check: BundleCheck
    verdict: Checked
    exit_code: int


def verify_evidence(
    bundle: Path,
    key: Path | None = None,
    *,
    allow_embedded_key: bool = False,
    allow_unsigned: bool = False,
) -> BundleVerified:
    """Re-hash every file of ``bundle`` and check its signature against ``key`` (None:
    the trusted-keys file); exit 1 on any difference or an untrusted signature."""
    from replay_tui.evidence.verify import verify_with_key

    chk = verify_with_key(
        bundle, key, allow_embedded_key=allow_embedded_key, allow_unsigned=allow_unsigned
    )
    return BundleVerified(check=chk, **_checked(chk.ok))


@dataclass(frozen=True, kw_only=True)
class StoreVerified:
    check: StoreCheck
    verdict: Checked
    exit_code: int


def verify_store(path: Path, anchors: Sequence[str] = ()) -> StoreVerified:
    """Walk the store's ledger and re-hash every stored fact, against the ledger heads
    noted down earlier (``anchors``, ``SEQ:HASH``); an unreadable store is a failed check
    (exit 1), as is any difference."""
    from replay_tui.evidence.storecheck import check_store

    chk = check_store(path, anchors)
    return StoreVerified(check=chk, **_checked(chk.ok))


@dataclass(frozen=True, kw_only=True)
class StatsDone:
    stats: Stats
    prometheus: Path | None
    """The node_exporter textfile written, else None."""
    exit_code: int = EXIT_OK


def store_stats(store: RunStore, *, prometheus: Path | None = None) -> StatsDone:
    """The store's reproducibility SLIs (and, with ``prometheus``, that textfile)."""
    from replay_tui.evidence.stats import compute_stats, write_prometheus

    s = compute_stats(store)
    if prometheus is not None:
        write_prometheus(s, prometheus)
    return StatsDone(stats=s, prometheus=prometheus)
