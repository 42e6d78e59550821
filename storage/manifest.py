"""The run manifest (schema v1): every fact a reproduction depends on.

A manifest arrives from untrusted places (another team's export, a hand-edited file, a
container), so parsing is strict: unknown fields, wrong types, non-finite numbers,
duplicate JSON keys, paths that could escape, oversized strings and oversized documents
are all refused with a message that names the field.  Missing knowledge is ``None``;
gap rules (``replay_tui.gaps``) then say what that costs.

Hashes are over the RFC 8785 canonical JSON form, so key order and whitespace never
change a hash while any change of a value does.

Why one module of about 900 lines: it is the schema.  Each field's model, its limits and
its validator sit together, and the published JSON Schema (``json_schema``) is generated
from these models; splitting them would put a field in one file and its check in another.
The vocabulary the schema names lives in ``storage/vocabulary.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, Self, TypeAlias

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from storage import canonical

SCHEMA_VERSION = 1
MAX_MANIFEST_BYTES = 8 * 1024 * 1024
MAX_STR = 4096
MAX_LONG_STR = 64 * 1024
MAX_LIST = 10_000
MAX_HISTORY_POINTS = 200_000
MAX_SAFE_INT = 2**53 - 1  # RFC 8785 numbers are IEEE doubles: larger ints lose bits
# Where a manifest keeps what ``seal`` gave for it: in the instance's ``__dict__`` beside
# the fields, where pydantic's dumps, equality and repr never look (a private attribute
# would make a sealed manifest unequal to the same one not yet sealed).
_SEALING = "_sealing"

# The ASCII formats are checked natively by pydantic-core where a model field uses them
# (``_matching``): a Python validator per value cost about half of validating a manifest.
# Rust's ``regex`` and Python's ``re`` agree on explicit ASCII classes, but not on ``\d``
# and ``\w`` beyond ASCII (Python's take more digits and letters), so the timestamp and
# the image reference stay Python checks: a manifest stored before must still read back.
_HEX40_RE = r"[0-9a-f]{40}"
_HEX64_RE = r"[0-9a-f]{64}"
_DIGEST_RE = r"sha256:[0-9a-f]{64}"
_RUN_ID_RE = r"[0-9A-Za-z][0-9A-Za-z_-]{7,63}"
_ENV_NAME_RE = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")
# A Docker image reference: [registry[:port]/]path[:tag][@sha256:hex]
_IMAGE_REF_RE = (
    r"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
_LABEL_RE = r"[^\x00-\x1f\x7f]*"
_DIGEST = re.compile(_DIGEST_RE)
_IMAGE_REF = re.compile(_IMAGE_REF_RE)
# A relative path whose every part is plain (word characters and . + - @ = ,): such a
# path passes every check of ``_check_rel_path`` once no part is "." or "..".
_PLAIN_REL_PATH = re.compile(r"[\w.+@=,-]+(?:/[\w.+@=,-]+)*")

HEX40_MESSAGE = "must be a full 40-character lowercase hex git commit"
HEX64_MESSAGE = "must be 64 lowercase hex characters (a sha256)"
DIGEST_MESSAGE = "must be 'sha256:' followed by 64 lowercase hex characters"
RUN_ID_MESSAGE = "must be 8-64 characters of letters, digits, '-' or '_'"
ENV_NAME_MESSAGE = "environment variable names are letters, digits and '_'"
TIMESTAMP_MESSAGE = "must be an RFC 3339 UTC timestamp like 2026-01-31T12:00:00.000Z"
IMAGE_REF_MESSAGE = "is not a valid image reference (registry/name[:tag][@sha256:...])"
LABEL_MESSAGE = "must not contain control characters"

_PATTERN_MESSAGES: dict[str, str] = {}
"""pydantic-core's pattern -> the message a mismatch is reported with."""


def _matching(regex: str, message: str, **constraints: Any) -> StringConstraints:
    """A string constraint pydantic-core checks natively: ``regex`` must match the whole
    value; ``manifest_from_data`` reports a mismatch as ``message``."""
    pattern = f"^(?:{regex})$"
    _PATTERN_MESSAGES[pattern] = message
    return StringConstraints(pattern=pattern, **constraints)


class ManifestError(ValueError):
    """A manifest was refused.  ``location`` names the field path (``data[0].path``)."""

    def __init__(self, message: str, location: str = "", source: str = "") -> None:
        self.message = message
        self.location = location
        self.source = source
        where = " ".join(p for p in (source, location) if p)
        super().__init__(f"{where}: {message}" if where else message)


def _check_digest(v: str) -> str:
    if not _DIGEST.fullmatch(v):
        raise ValueError(DIGEST_MESSAGE)
    return v


def _check_timestamp(v: str) -> str:
    if not _TIMESTAMP.fullmatch(v):
        raise ValueError(TIMESTAMP_MESSAGE)
    try:
        datetime.fromisoformat(v[:19])
    except ValueError:
        raise ValueError("is not a real date and time") from None
    return v


def _check_rel_path(v: str) -> str:
    """Relative, normalised POSIX path that cannot leave its root."""
    if _PLAIN_REL_PATH.fullmatch(v):
        parts = v.split("/")
        if "." not in parts and ".." not in parts:
            return v
    if not v:
        raise ValueError("must not be empty")
    if "\x00" in v:
        raise ValueError("must not contain NUL")
    if "\\" in v:
        raise ValueError("must use '/' separators")
    if v.startswith("/") or re.match(r"[A-Za-z]:", v):
        raise ValueError("must be relative, not absolute")
    parts = v.split("/")
    if ".." in parts:
        raise ValueError("must not contain '..'")
    if posixpath.normpath(v) != v:
        raise ValueError(f"must be normalised (use {posixpath.normpath(v)!r})")
    if any(ord(c) < 0x20 for c in v):
        raise ValueError("must not contain control characters")
    return v


def _check_image_ref(v: str) -> str:
    if not _IMAGE_REF.fullmatch(v):
        raise ValueError(IMAGE_REF_MESSAGE)
    return v


Str = Annotated[str, StringConstraints(max_length=MAX_STR)]
Label = Annotated[str, _matching(_LABEL_RE, LABEL_MESSAGE, max_length=256)]
LongStr = Annotated[str, StringConstraints(max_length=MAX_LONG_STR)]


def _schema(pattern: str, description: str, **extra: Any) -> WithJsonSchema:
    """The JSON Schema of a validated string, so the exported schema is as strict."""
    return WithJsonSchema(
        {"type": "string", "pattern": pattern, "description": description, **extra}
    )


Hex40 = Annotated[
    str, _matching(_HEX40_RE, HEX40_MESSAGE), _schema("^[0-9a-f]{40}$", "full git commit id")
]
Hex64 = Annotated[
    str, _matching(_HEX64_RE, HEX64_MESSAGE), _schema("^[0-9a-f]{64}$", "sha256, hex")
]
Digest = Annotated[
    str,
    _matching(_DIGEST_RE, DIGEST_MESSAGE),
    _schema("^sha256:[0-9a-f]{64}$", "content digest"),
]
RunId = Annotated[
    str,
    _matching(_RUN_ID_RE, RUN_ID_MESSAGE),
    _schema("^[0-9A-Za-z][0-9A-Za-z_-]{7,63}$", "run id (UUIDv7 or ULID)"),
]
Timestamp = Annotated[
    str,
    AfterValidator(_check_timestamp),
    _schema(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$", "RFC 3339 UTC time"),
]
RelPath = Annotated[
    str,
    StringConstraints(max_length=1024),
    AfterValidator(_check_rel_path),
    _schema(
        r"^(?!/)(?![A-Za-z]:)(?!.*(^|/)\.\.(/|$))[^\x00\\]+$",
        "relative, normalised POSIX path that cannot leave its root",
        maxLength=1024,
    ),
]
EnvName = Annotated[
    str,
    _matching(_ENV_NAME_RE, ENV_NAME_MESSAGE),
    _schema("^[A-Za-z_][A-Za-z0-9_]{0,127}$", "env name"),
]
ImageRef = Annotated[str, StringConstraints(max_length=512), AfterValidator(_check_image_ref)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
"""A finite float, checked natively by pydantic-core (no NaN or infinity)."""
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)]
Seed = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]
Count = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]


Point = Annotated[tuple[SafeInt, Finite], Strict(False)]
"""A history point ``[step, value]``: a JSON array (or tuple) of two; the pair is lax so a
list becomes a tuple natively, its step and value stay strict."""

JSONValue: TypeAlias = Any  # checked by _check_config: JSON scalars, lists, string-keyed maps


class _Model(BaseModel):
    # defer_build: the validators and serializers are built on first use, not at import,
    # so importing the store (the TUI's first frame) does not pay for every model here.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class CodeInfo(_Model):
    """Where the training code came from."""

    repo_url: Str | None = None
    commit: Hex40 | None = None
    branch: Label | None = None
    dirty: bool | None = None
    diff_sha256: Hex64 | None = None
    untracked: list[RelPath] = Field(default_factory=list, max_length=MAX_LIST)


class ImageInfo(_Model):
    """The container image the run used; ``digest`` is the repo digest when pushed."""

    reference: ImageRef | None = None
    digest: Digest | None = None
    image_id: Digest | None = None
    platform: Label | None = None


class DataInfo(_Model):
    """One dataset input, pinned by content (a tree hash for a folder)."""

    name: Label
    path: RelPath
    sha256: Hex64 | None = None
    size_bytes: Count | None = None
    file_count: Count | None = None
    version: Label | None = None


class RandomnessInfo(_Model):
    """Every seed, per source; ``None`` means not known to be seeded."""

    seed: Seed | None = None
    python: Seed | None = None
    numpy: Seed | None = None
    torch: Seed | None = None
    cuda: Seed | None = None
    dataloader_workers: Seed | None = None
    python_hash_seed: Label | None = None
    # added later: the seed ``record --seed`` handed the program where the program's own
    # record (a framework's) says it seeded another (``seed``).  Left out when unset.
    seed_handed: Seed | None = Field(default=None, exclude_if=lambda v: v is None)


class DeterminismInfo(_Model):
    """Determinism switches as they were set during the run."""

    deterministic_algorithms: bool | None = None
    cudnn_deterministic: bool | None = None
    cudnn_benchmark: bool | None = None
    cublas_workspace_config: Label | None = None
    allow_tf32: bool | None = None
    mixed_precision: Label | None = None
    nondeterministic_ops: list[Str] = Field(default_factory=list, max_length=MAX_LIST)
    # added later: where the switches came from when the SDK did not say them (torch's
    # state observed at the run's end, or the framework file that set them).  Left out
    # when unset, so manifests stored before it keep their hash.
    source: Str | None = Field(default=None, exclude_if=lambda v: v is None)


class InterpreterInfo(_Model):
    """The Python a recorded command ran: its path as found, version, virtual env."""

    path: Str
    version: Label | None = None
    virtual_env: Str | None = None


class EnvironmentInfo(_Model):
    """Software environment of the process that trained."""

    python_version: Label | None = None
    packages: list[Str] | None = Field(default=None, max_length=MAX_LIST)
    packages_sha256: Hex64 | None = None
    torch_version: Label | None = None
    cuda_version: Label | None = None
    cudnn_version: Label | None = None
    nccl_version: Label | None = None
    os: Label | None = None
    kernel: Label | None = None
    hostname: Label | None = None
    # added later: the interpreter the command ran (record); left out when unset
    interpreter: InterpreterInfo | None = Field(default=None, exclude_if=lambda v: v is None)


class GpuInfo(_Model):
    name: Label
    memory_mb: Count | None = None
    compute_capability: Label | None = None
    uuid: Label | None = None


class HardwareInfo(_Model):
    cpu_model: Label | None = None
    cpu_count: Count | None = None
    gpus: list[GpuInfo] | None = Field(default=None, max_length=1024)
    gpu_count: Count | None = None
    driver_version: Label | None = None
    interconnect: Label | None = None


ArtifactKind = Literal["checkpoint", "file", "log", "metrics"]


Reason = Annotated[str, _matching(_LABEL_RE, LABEL_MESSAGE, max_length=1024)]
"""One line of why, in words: no control characters (no newline), at most 1024 long."""


class ArtifactInfo(_Model):
    path: RelPath
    sha256: Hex64 | None = None
    size_bytes: Count | None = None
    kind: ArtifactKind = "file"
    tensor_sha256: Hex64 | None = None
    # added later: why the run did not write this file (it was left in the output folder
    # before the run); listed without a hash.  Left out of the JSON when unset, so
    # manifests stored before it keep their manifest_sha256.
    stale: Reason | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _stale_has_no_hash(self) -> ArtifactInfo:
        if self.stale is not None and (self.sha256 is not None or self.tensor_sha256 is not None):
            raise ValueError("a stale artifact (not written by the run) has no hash")
        return self


class OutputsInfo(_Model):
    artifacts: list[ArtifactInfo] = Field(default_factory=list, max_length=MAX_LIST)
    metrics: dict[Label, Finite] = Field(default_factory=dict, max_length=MAX_LIST)
    metric_history: dict[Label, list[Point]] = Field(default_factory=dict, max_length=1000)
    log_sha256: Hex64 | None = None
    log_tail: LongStr | None = None
    # added later: the wall time of each point of metric_history[name], in seconds since
    # the run started (a plot's x axis by time).  Left out of the JSON when empty, so
    # manifests stored before it keep their manifest_sha256.
    metric_times: dict[Label, list[Finite]] = Field(
        default_factory=dict, max_length=1000, exclude_if=lambda v: not v
    )

    # added later: the steps at which a metric was NaN or infinite (kept out of the
    # history, which holds finite values only): a diverged loss is a fact an auditor
    # must see.  Left out of the JSON when empty.
    metric_nonfinite: dict[Label, list[SafeInt]] = Field(
        default_factory=dict, max_length=1000, exclude_if=lambda v: not v
    )
    # added later: where each metric a framework file also held was taken from (the
    # file's path, or "reported" where the SDK or the launcher's flags gave it), and the
    # framework files that gave no metric, with why.  Left out of the JSON when empty.
    metric_sources: dict[Label, Str] = Field(
        default_factory=dict, max_length=1000, exclude_if=lambda v: not v
    )
    metric_files_unread: dict[RelPath, LongStr] = Field(
        default_factory=dict, max_length=256, exclude_if=lambda v: not v
    )

    @model_validator(mode="after")
    def _times_match_history(self) -> OutputsInfo:
        for name, times in self.metric_times.items():
            points = self.metric_history.get(name)
            if points is None:
                raise ValueError(f"metric_times[{name!r}]: no metric_history of that name")
            if len(times) != len(points):
                raise ValueError(
                    f"metric_times[{name!r}]: {len(times)} times for {len(points)} points"
                )
        return self


class SchedulerJob(_Model):
    """Where a cluster scheduler ran a replay (the slurm backend), for an auditor."""

    scheduler: Literal["slurm"]
    job_id: Label
    node: Label | None = None
    partition: Label | None = None
    account: Label | None = None
    qos: Label | None = None
    time_limit: Label | None = None
    state: Label | None = None
    reason: LongStr | None = None


class SandboxInfo(_Model):
    """The walls a replay's container ran within (the docker backend)."""

    memory_limit: Label | None = None
    """The memory limit as the engine took it (``512m``), swap included."""
    cpus: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    user: Label | None = None
    """``UID:GID`` the container ran as (``--user``)."""
    pids_limit: Count | None = None
    output_bytes: Count | None = None
    """Each writable folder's size bound (None: not bounded)."""


class RuntimeInfo(_Model):
    """Which container runtime ran a replay and what it says ran (the podman and
    apptainer backends): the OCI digest asked for, and the bytes in the runtime's terms."""

    name: Literal["docker", "podman", "apptainer"]
    version: Label
    requested_digest: Digest
    image_id: Digest | None = Field(default=None, exclude_if=lambda v: v is None)
    """The OCI image id the runtime ran (Podman)."""
    sif_sha256: Hex64 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The SIF file's sha256 (Apptainer): not the OCI digest."""
    sif_built_from: Digest | None = Field(default=None, exclude_if=lambda v: v is None)
    """The digest Apptainer says the SIF was built from."""


class ReplayInfo(_Model):
    """How a replay ran (only on ``kind="replay"`` manifests)."""

    backend: Literal["docker", "local", "slurm", "podman", "apptainer"]
    environment_pinned: bool
    network: Literal["none", "bridge"] = "none"
    gpus: Literal["all", "none"] = "none"
    cpu_fallback: bool = False
    forced_data: bool = False
    diff_applied: bool = False
    determinism: Literal["recorded", "off"] = "recorded"
    reason: LongStr | None = None
    # added later: left out of the JSON when unset, so older replays keep their hash
    job: SchedulerJob | None = Field(default=None, exclude_if=lambda v: v is None)
    # added later: the container's limits; left out of the JSON when unset
    sandbox: SandboxInfo | None = Field(default=None, exclude_if=lambda v: v is None)
    # added later: the container runtime and the identity of what it ran; left out when unset
    runtime: RuntimeInfo | None = Field(default=None, exclude_if=lambda v: v is None)


class CaptureInfo(_Model):
    """How the launcher captured outputs, so a replay captures them the same way."""

    artifact_globs: list[Str] = Field(default_factory=list, max_length=256)
    metrics_file: RelPath | None = None
    metric_regex: list[Str] = Field(default_factory=list, max_length=64)
    metric_name: Label | None = None
    output_dirs: list[RelPath] = Field(default_factory=list, max_length=256)
    # added later: globs of outputs the run declared volatile (``record --volatile``): they
    # may differ from run to run, so a comparison lists them and does not judge their bytes.
    # Left out of the JSON when empty, so manifests stored before it keep their hash.
    volatile_globs: list[Str] = Field(
        default_factory=list, max_length=256, exclude_if=lambda v: not v
    )


class ConfigFileInfo(_Model):
    """A config file named on the command line, pinned by content (never executed)."""

    path: Str
    sha256: Hex64
    size_bytes: Count
    format: Literal["yaml", "json", "toml", "python", "cfg", "ini"]
    parsed: bool = False
    in_repo: RelPath | None = None


class ConfigSourceInfo(_Model):
    """Where ``config`` came from when the program did not report it alone.

    ``source`` names what ``config`` holds: ``sdk`` (the program's own, which wins; the
    command line's view is then kept in ``argv``), ``argv`` (read from the command line
    and the config files it names), ``tracker`` (an imported run's parameters) or
    ``framework`` (what a framework wrote: ``hparams.yaml``, ``training_args.bin``, named
    in ``framework_files``).
    """

    source: Literal["sdk", "argv", "tracker", "framework"]
    argv: dict[Label, JSONValue] | None = None
    raw: dict[Label, Str | list[Str | None] | None] = Field(
        default_factory=dict, max_length=MAX_LIST
    )
    positional: list[Str] = Field(default_factory=list, max_length=4096)
    files: list[ConfigFileInfo] = Field(default_factory=list, max_length=256)
    # added later: the framework files config was read from (``hparams.yaml``,
    # ``training_args.bin``); left out of the JSON when empty
    framework_files: list[RelPath] = Field(
        default_factory=list, max_length=256, exclude_if=lambda v: not v
    )


class SourceInfo(_Model):
    """An imported run's origin: the tracker, where it keeps runs, and the run's id there."""

    tracker: Label
    uri: Str
    run_id: Label
    experiment: Label | None = None
    url: Str | None = None


def _unset(value: Any) -> bool:
    return value is None


class LaunchInfo(_Model):
    """A command started through a distributed launcher (torchrun, accelerate launch,
    deepspeed): which, and the topology its command line says (None where it says none)."""

    launcher: Label
    processes_per_node: Count | None = None
    nodes: Count | None = None


class IntegrityInfo(_Model):
    manifest_sha256: Hex64 | None = None
    signature: Str | None = None


RunStatus = Literal["succeeded", "failed", "interrupted", "timed_out"]


class RunManifest(_Model):
    """A training run's full provenance.  Each group is described in
    docs/architecture.md and in the JSON Schema (``replay-tui schema``)."""

    schema_version: Literal[1] = 1
    # identity
    run_id: RunId
    name: Label = ""
    kind: Literal["original", "replay"] = "original"
    replay_of: RunId | None = None
    status: RunStatus
    exit_code: SafeInt | None = None
    started_at: Timestamp
    ended_at: Timestamp | None = None
    duration_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    tags: dict[Label, Label] = Field(default_factory=dict, max_length=256)
    # command
    argv: list[Str] = Field(default_factory=list, max_length=4096)
    workdir: RelPath = "."
    env: dict[EnvName, Str] = Field(default_factory=dict, max_length=1024)
    # groups
    code: CodeInfo = Field(default_factory=CodeInfo)
    image: ImageInfo | None = None
    data: list[DataInfo] = Field(default_factory=list, max_length=MAX_LIST)
    config: dict[Label, JSONValue] = Field(default_factory=dict, max_length=MAX_LIST)
    config_hash: Hex64 | None = None
    randomness: RandomnessInfo = Field(default_factory=RandomnessInfo)
    determinism: DeterminismInfo = Field(default_factory=DeterminismInfo)
    environment: EnvironmentInfo = Field(default_factory=EnvironmentInfo)
    hardware: HardwareInfo = Field(default_factory=HardwareInfo)
    outputs: OutputsInfo = Field(default_factory=OutputsInfo)
    capture: CaptureInfo | None = None
    replay: ReplayInfo | None = None
    # optional groups added after v1 shipped: left out of the JSON (and so of every
    # hash) when unset, so manifests stored before them keep their manifest_sha256
    config_source: ConfigSourceInfo | None = Field(default=None, exclude_if=_unset)
    source: SourceInfo | None = Field(default=None, exclude_if=_unset)
    launch: LaunchInfo | None = Field(default=None, exclude_if=_unset)
    integrity: IntegrityInfo = Field(default_factory=IntegrityInfo)

    # -- hashing -------------------------------------------------------------------

    def body(self) -> dict[str, Any]:
        """The manifest as plain JSON data, without the integrity group."""
        data = self.model_dump(mode="json", exclude={"integrity"})
        return data

    def compute_sha256(self) -> str:
        return sha256_hex(canonical_json(self.body()))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy, less the remembered seal when ``update`` changes the content."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied.__dict__.pop(_SEALING, None)
        return copied

    def sealed(self) -> RunManifest:
        """A copy with ``config_hash`` and ``manifest_sha256`` filled in (both worked out
        again, whatever the manifest held).  The copy remembers its seal, so storing it
        does not canonicalise it again."""
        update: dict[str, Any] = {}
        if self.integrity.manifest_sha256 is not None:
            update["integrity"] = self.integrity.model_copy(update={"manifest_sha256": None})
        stated = self.config_hash
        if self.config and stated is not None and stated != config_hash(self.config):
            update["config_hash"] = None  # worked out again by seal()
        m = self.model_copy(update=update) if update else self
        return m._sealed_copy(m.seal())

    def _sealed_copy(self, sealing: tuple[str, str, str | None]) -> RunManifest:
        """This manifest with the digests ``seal`` gave for it filled in.  Its own seal
        is the same: its body (which ``config_hash`` is part of) is the one hashed, and
        the canonical text already holds the digest."""
        sha, _, chash = sealing
        update: dict[str, Any] = {
            "integrity": self.integrity.model_copy(update={"manifest_sha256": sha})
        }
        if chash != self.config_hash:
            update["config_hash"] = chash
        sealed = self.model_copy(update=update)
        sealed.__dict__[_SEALING] = sealing
        return sealed

    def sealed_json(self) -> tuple[RunManifest, str, str]:
        """Seal once: (sealed manifest, manifest_sha256, canonical JSON of the whole)."""
        sealing = self.seal()
        sha, full, _ = sealing
        return self._sealed_copy(sealing), sha, full

    def seal(self) -> tuple[str, str, str | None]:
        """What sealing gives, without building the sealed copy: ``(manifest_sha256,
        canonical JSON of the whole sealed manifest, its config_hash)``.  A manifest
        sealed elsewhere (``manifest_sha256`` set) is taken as it is; otherwise a
        missing ``config_hash`` is filled in.

        The whole document is canonicalised once; the body (without ``integrity``) that
        the digest covers is cut out of it (``canonical.dumps_sealed``).  The answer is
        remembered: a manifest is frozen, so validating a sealed manifest (which checks
        its digest), sealing it and storing it canonicalise it once in all.  Its dicts and
        lists are not frozen by pydantic: nothing changes them in place (a change would
        not be seen by the remembered seal; make a changed copy with ``model_copy``).
        """
        remembered: tuple[str, str, str | None] | None = self.__dict__.get(_SEALING)
        if remembered is not None:
            return remembered
        data = self.model_dump(mode="json")
        already = self.integrity.manifest_sha256 is not None  # sealed elsewhere: keep as is
        if self.config and self.config_hash is None and not already:
            data["config_hash"] = config_hash(self.config)
        sha, raw = canonical.dumps_sealed(data, "integrity", "manifest_sha256", model_data=True)
        sealing = (sha, raw.decode("utf-8"), data["config_hash"])
        self.__dict__[_SEALING] = sealing
        return sealing

    def to_json(self) -> str:
        """Canonical JSON of the whole manifest (integrity included)."""
        return canonical_json(self.model_dump(mode="json")).decode("utf-8")


# -- canonical JSON and hashes -------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical form."""
    return canonical.dumps(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the full hyperparameter map."""
    return sha256_hex(canonical_json(dict(config)))


# -- untrusted input -----------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # built in C; a key given twice makes it shorter than the pairs
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ManifestError(f"duplicate key {k!r} in a JSON object")
            seen.add(k)
    return out


def _no_constants(name: str) -> Any:
    raise ManifestError(f"{name} is not allowed: numbers must be finite")


def _check_unicode(s: str, where: str) -> None:
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise ManifestError(
                "contains a lone UTF-16 surrogate (\\ud800-\\udfff)", where
            ) from None


def _check_config(value: Any, where: str, depth: int = 0) -> None:
    """A config value is JSON: null, bools, strings (at most ``MAX_LONG_STR``, no lone
    surrogate), integers within +-2**53, finite floats (a whole one within +-2**53 or
    from 1e21 up: between, canonical JSON writes it as an integer out of that range),
    lists and string-keyed maps nested at most 32 deep; a ManifestError names the first
    value that is not."""
    _check_json(value, (where,), depth)


def _where(path: tuple[Any, ...]) -> str:
    """``config.a[0].b`` from a path (only made for an error)."""
    out = str(path[0])
    for p in path[1:]:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _check_json(value: Any, path: tuple[Any, ...], depth: int) -> None:
    if depth > 32:
        raise ManifestError("nested deeper than 32 levels", _where(path))
    t = type(value)
    if t is str:
        if len(value) > MAX_LONG_STR:
            raise ManifestError(f"string longer than {MAX_LONG_STR} characters", _where(path))
        if not value.isascii():
            _check_unicode(value, _where(path))
        return
    if value is None or t is bool:
        return
    if t is int:
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return
        raise ManifestError("integer outside the exactly representable range +-2**53", _where(path))
    if t is float:
        if not math.isfinite(value):
            raise ManifestError("must be a finite number (no NaN or infinity)", _where(path))
        if canonical.written_as_big_integer(value):
            raise ManifestError(
                "a whole number beyond +-2**53 (canonical JSON writes it as an integer, which"
                " would not read back): keep it within the range, or give it as a string",
                _where(path),
            )
        return
    if t is list:
        for i, item in enumerate(value):
            if type(item) is not str or len(item) > MAX_LONG_STR or not item.isascii():
                _check_json(item, (*path, i), depth + 1)  # a plain short ASCII string: ok
        return
    if t is dict:
        for k, item in value.items():
            if type(k) is not str:
                raise ManifestError("keys must be strings", _where(path))
            if len(k) > MAX_STR:
                raise ManifestError(f"key longer than {MAX_STR} characters", _where(path))
            if not k.isascii():
                _check_unicode(k, _where(path))
            ti = type(item)
            if ti is str and len(item) <= MAX_LONG_STR and item.isascii():
                continue
            if (ti is int and -MAX_SAFE_INT <= item <= MAX_SAFE_INT) or ti is bool:
                continue
            _check_json(item, (*path, k), depth + 1)
        return
    # subclasses of the JSON types (an IntEnum, a str subclass) as before, by isinstance
    if isinstance(value, bool | str | int | float | list | dict):
        _check_json(_plain(value), path, depth)
        return
    raise ManifestError(f"unsupported value of type {type(value).__name__}", _where(path))


def _plain(value: Any) -> Any:
    """A subclass of a JSON type as that type (what the old isinstance checks allowed)."""
    base: Any
    for base in (bool, str, int, float, list, dict):
        if isinstance(value, base):
            return base(value)
    return value


def _loc(parts: tuple[int | str, ...]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def manifest_from_data(data: Any, *, source: str = "") -> RunManifest:
    """Validate already-parsed JSON data into a manifest (strict)."""
    if not isinstance(data, dict):
        raise ManifestError("top level must be a JSON object", source=source)
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise ManifestError(
            f"unsupported schema_version {version!r}; this tool reads version {SCHEMA_VERSION}",
            "schema_version",
            source,
        )
    cfg = data.get("config")
    if isinstance(cfg, dict):
        try:
            _check_config(cfg, "config")
        except ManifestError as e:
            raise ManifestError(e.message, e.location, source) from None
    cs = data.get("config_source")
    if isinstance(cs, dict) and isinstance(cs.get("argv"), dict):
        try:
            _check_config(cs["argv"], "config_source.argv")
        except ManifestError as e:
            raise ManifestError(e.message, e.location, source) from None
    try:
        m = RunManifest.model_validate(data)  # strict by the models' config
    except ValidationError as e:
        err = e.errors()[0]
        loc = _loc(tuple(err["loc"]))
        msg = err["msg"]
        ctx = err.get("ctx", {})
        if err["type"] == "string_pattern_mismatch":
            msg = _PATTERN_MESSAGES.get(str(ctx.get("pattern")), msg)
        elif err["type"] == "string_unicode":
            msg = "is not valid Unicode text (it holds a lone surrogate)"
        elif err["type"] == "value_error" and "error" in ctx:
            msg = str(ctx["error"])  # a validator's own words, without "Value error, "
        if len(e.errors()) > 1:
            msg += f" (and {len(e.errors()) - 1} more problem(s))"
        raise ManifestError(msg, loc, source) from None
    _check_consistency(m, source)
    return m


def _check_consistency(m: RunManifest, source: str) -> None:
    if m.kind == "replay" and m.replay_of is None:
        raise ManifestError("a replay must name the run it replays", "replay_of", source)
    if m.kind == "original" and m.replay_of is not None:
        raise ManifestError("only kind='replay' may set replay_of", "replay_of", source)
    if m.config and m.config_hash is not None and m.config_hash != config_hash(m.config):
        raise ManifestError("does not match the sha256 of the config", "config_hash", source)
    if m.code.diff_sha256 is not None and m.code.dirty is False:
        raise ManifestError("a clean tree cannot have a diff", "code.diff_sha256", source)
    seen: set[str] = set()
    for i, a in enumerate(m.outputs.artifacts):
        if a.path in seen:
            raise ManifestError(
                f"artifact {a.path!r} listed twice", f"outputs.artifacts[{i}]", source
            )
        seen.add(a.path)
    for name, series in m.outputs.metric_history.items():
        if len(series) > MAX_HISTORY_POINTS:
            raise ManifestError(
                f"more than {MAX_HISTORY_POINTS} points", f"outputs.metric_history.{name}", source
            )
    claimed = m.integrity.manifest_sha256
    if claimed is not None and claimed != m.seal()[0]:  # remembered for storing it
        raise ManifestError(
            "does not match the manifest's content (it was altered after sealing)",
            "integrity.manifest_sha256",
            source,
        )


def parse_manifest(raw: bytes | str, *, source: str = "") -> RunManifest:
    """Parse untrusted JSON bytes into a manifest, or raise ManifestError."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"manifest is {len(raw)} bytes; the limit is {MAX_MANIFEST_BYTES}", source=source
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"not UTF-8 (byte {e.start})", source=source) from None
    canonical_sealed = _as_written(raw, text, source)
    if canonical_sealed is not None:
        return canonical_sealed
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except ManifestError as e:
        raise ManifestError(e.message, source=source) from None
    except json.JSONDecodeError as e:
        raise ManifestError(
            f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}", source=source
        ) from None
    except RecursionError:
        raise ManifestError("JSON nested too deeply", source=source) from None
    except ValueError as e:  # e.g. an integer literal longer than 4300 digits
        raise ManifestError(f"invalid JSON: {e}", source=source) from None
    return manifest_from_data(data, source=source)


def _as_written(raw: bytes, text: str, source: str) -> RunManifest | None:
    """A sealed manifest in the canonical form this tool writes it in, parsed by orjson
    (a quarter of the time ``json`` takes with the duplicate-key hook); None for anything
    else, which the full parse then takes, with its errors in their usual order.

    Such a text needs no search for duplicate keys: the manifest's canonical JSON (worked
    out anyway to check its digest) is the text itself, and it could not be if a key had
    been given twice, since the parsed value holds each key once.
    """
    if not raw.startswith(b'{"') or b'": ' in raw:  # pretty-printed: not canonical
        return None
    if b'"integrity":{"manifest_sha256":"' not in raw:  # not sealed
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict:
        return None
    try:
        m = manifest_from_data(data, source=source)
    except ManifestError:
        return None
    if m.integrity.manifest_sha256 is None or m.seal()[1] != text:
        return None
    return m


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the manifest."""
    schema = RunManifest.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://replay-tui.invalid/schema/run-manifest-v1.json"
    return schema
