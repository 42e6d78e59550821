"""Everything the store knows about one run that goes into its evidence bundle."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from replay_tui.gaps import Gap, evaluate, evaluate_pair
from storage.manifest import RunManifest, sha256_hex
from storage.records import ReplayFact, RunRecord
from storage.store import RunQuery, RunStore

if TYPE_CHECKING:
    from replay_tui.compare.comparison import Comparison
    from replay_tui.compare.floor import NoiseFloorFact

MAX_REPLAYS = 10_000


@dataclass(frozen=True)
class ReplayEntry:
    """One replay of the run: its fact (when the replay ran here) and its manifest."""

    run_id: str | None
    fact: ReplayFact | None
    manifest: RunManifest | None
    comparison_body: dict[str, Any] | None
    """The stored comparison as the store keeps it (what the bundle's comparison.json holds)."""
    gaps: list[Gap] = field(default_factory=list)
    pair_gaps: list[Gap] = field(default_factory=list)

    @property
    def verdict(self) -> str | None:
        if self.fact is not None and self.fact.verdict:
            return self.fact.verdict
        return self.comparison.verdict if self.comparison is not None else None

    @functools.cached_property
    def comparison(self) -> Comparison | None:
        """The stored comparison, typed."""
        from replay_tui.compare.stored import comparison_from_dict

        body = self.comparison_body
        return None if body is None else comparison_from_dict(body)

    @property
    def determinism_off(self) -> bool:
        m = self.manifest
        return bool(m and m.replay and m.replay.determinism == "off")

    @property
    def status(self) -> str:
        """The replay status (``replay_tui.verdicts``): the fact's, else, for a replay
        ingested from elsewhere, its manifest's (a command that ran to its end)."""
        from replay_tui.verdicts import normalize_status

        if self.fact is not None:
            return normalize_status(self.fact.status)
        return normalize_status(self.manifest.status if self.manifest else None)

    @property
    def word(self) -> str:
        """How this attempt ended in the words used everywhere: its verdict when it
        completed, else CANCELLED / INTERRUPTED / TIMED OUT / INFRA-ERROR."""
        from replay_tui.verdicts import outcome_word

        return outcome_word(self.status, self.verdict)

    @property
    def counts(self) -> bool:
        """Evidence: completed, judged, determinism as recorded."""
        from replay_tui.verdicts import counts_as_evidence

        det = "off" if self.determinism_off else "recorded"
        return counts_as_evidence(self.status, self.verdict, det)


@dataclass(frozen=True)
class Evidence:
    record: RunRecord
    original: RunManifest
    gaps: list[Gap]
    replays: list[ReplayEntry]
    chosen: str | None = None
    """A replay run id picked by the caller (``export --replay``) over the latest."""
    floor: NoiseFloorFact | None = None
    """The run's latest noise-floor fact that holds a floor (its record: the replicas,
    their statistics, the rule's parameters), when one was measured."""

    @property
    def noise_bands(self) -> dict[str, tuple[list[tuple[int, float, float]], int | None]]:
        """Per metric, the replicas' band and the step the latest replay's curve leaves it
        (from the latest comparison's noise judgement; empty when there was none)."""
        latest = self.latest
        cmp = latest.comparison if latest is not None else None
        if cmp is None or cmp.noise is None:
            return {}
        return {
            b.metric: ([(p.step, p.lo, p.hi) for p in b.points], b.leaves_band_at)
            for b in cmp.noise.bands
        }

    @property
    def latest(self) -> ReplayEntry | None:
        """The chosen replay, else the newest completed one that reached a verdict with the
        recorded determinism: a cancelled, interrupted or failed attempt is never it."""
        if self.chosen is not None:
            return next((r for r in self.replays if r.run_id == self.chosen), None)
        judged = [r for r in self.replays if r.counts]
        return judged[-1] if judged else None

    @property
    def verdict(self) -> str | None:
        latest = self.latest
        return latest.verdict if latest else None

    def verdict_text(self) -> str:
        """The verdict as the CLI and the TUI print it: the verdict; how a chosen replay
        that did not complete ended; or why there is none."""
        latest = self.latest
        if latest is not None and latest.word != latest.verdict:
            return f"{latest.word} (did not complete: not a verdict)"
        if self.verdict:
            return self.verdict
        if self.replays:
            return f"none: {len(self.replays)} replay(s), none completed with a verdict"
        return "not replayed"


def gather(store: RunStore, run_ref: str, *, replay: str | None = None) -> Evidence:
    """The evidence of ``run_ref``; ``replay`` (an id or prefix of one of its replays)
    names the replay whose verdict it carries instead of the latest completed one."""
    from replay_tui.errors import BadInput

    rec = store.get_run(run_ref)
    if rec.kind != "original":
        raise BadInput(
            f"run {rec.id} is a replay; evidence is exported for the run it replays",
            f"export {rec.replay_of}",
        )
    original = store.manifest(rec.id)
    entries: list[ReplayEntry] = []
    seen: set[str] = set()

    def entry(replay_id: str | None, fact: ReplayFact | None) -> ReplayEntry:
        if replay_id is None:
            return ReplayEntry(None, fact, None, None)
        m = store.manifest(replay_id)
        return ReplayEntry(
            replay_id,
            fact,
            m,
            store.latest_comparison(original.run_id, replay_id),
            evaluate(m),
            evaluate_pair(original, m),
        )

    for fact in store.replays_of(rec.id):
        rid = fact.replay_run
        if rid is not None:
            seen.add(rid)
        entries.append(entry(rid, fact))
    # replays recorded elsewhere and ingested (no replay fact in this store)
    others = store.list_runs(
        RunQuery(
            kind="replay",
            replay_of=rec.id,
            order="started_at",
            descending=False,
            limit=MAX_REPLAYS,
        )
    )
    ingested = [entry(r.id, None) for r in others if r.id not in seen]
    replays = ingested + entries
    chosen = None
    if replay is not None:
        chosen = _pick_replay(store, rec.id, replay, replays)
    from replay_tui.compare.floor import latest_floor_fact

    floor = latest_floor_fact(store, rec.id)
    return Evidence(rec, original, evaluate(original), replays, chosen, floor)


def _pick_replay(store: RunStore, run_id: str, ref: str, replays: list[ReplayEntry]) -> str:
    from replay_tui.errors import BadInput
    from storage.store import StoreError

    try:
        rid = store.resolve(ref)
    except StoreError as e:
        raise BadInput(f"--replay {ref!r}: {e}") from None
    entry = next((r for r in replays if r.run_id == rid), None)
    if entry is None:
        raise BadInput(f"--replay {ref!r}: run {rid} is not a replay of {run_id}")
    if entry.verdict is None:
        raise BadInput(f"--replay {ref!r}: replay {rid} has no verdict ({entry.status})")
    return rid


def log_bytes(store: RunStore, m: RunManifest) -> bytes | None:
    """The run's captured output: the stored blob, else the copy kept beside the store."""
    if m.outputs.log_sha256:
        data = store.get_blob(m.outputs.log_sha256)
        if data is not None:
            return data
    from replay_tui.door import Refused, read_under

    try:  # what the run printed: a regular file, no link, at most LIMITS["run log"]
        data = read_under(store.path.parent / "logs", f"{m.run_id}.log", "run log")
    except Refused:
        return None
    if m.outputs.log_sha256 and sha256_hex(data) != m.outputs.log_sha256:
        return None  # a copy that no longer matches the recorded hash is not evidence
    return data
