"""The rules over one manifest: image, code, data, seeds, framework files, determinism,
environment, outputs, config source and replay.  Each registers with ``@rule``."""

from __future__ import annotations

from collections.abc import Iterator

from replay_tui.door import glob_match, glob_parts
from replay_tui.gaps.registry import Gap, rule
from replay_tui.safety import escape_control
from storage.manifest import RunManifest


def _has_gpu(m: RunManifest) -> bool:
    return bool(m.hardware.gpus) or bool(m.hardware.gpu_count)


# -- image ----------------------------------------------------------------------------


@rule
def image_rules(m: RunManifest) -> Iterator[Gap]:
    img = m.image
    if img is None or (img.reference is None and img.digest is None and img.image_id is None):
        yield Gap(
            "IMAGE_NONE",
            "critical",
            "image",
            "no container image recorded: the software environment is not pinned",
            "record with --image REF so the run has an image digest to replay from",
        )
        return
    if img.digest is None and img.image_id is None:
        yield Gap(
            "IMAGE_TAG_ONLY",
            "critical",
            "image.reference",
            f"image recorded by mutable tag {img.reference!r} only: the tag can move",
            "push the image to a registry and record its repo digest (name@sha256:...)",
        )
    elif img.digest is None:
        yield Gap(
            "IMAGE_NOT_IN_REGISTRY",
            "warning",
            "image.digest",
            "the image is known only by its local id: no registry can hand it out again",
            "push the image to a registry so its repo digest can be pulled on another host",
        )


# -- code -----------------------------------------------------------------------------


@rule
def code_rules(m: RunManifest) -> Iterator[Gap]:
    c = m.code
    if c.commit is None:
        yield Gap(
            "CODE_COMMIT_UNKNOWN",
            "critical",
            "code.commit",
            "the git commit of the training code is unknown",
            "run the training from a git repository so the commit is recorded",
        )
        return
    if c.dirty is None:
        yield Gap(
            "CODE_DIRTY_UNKNOWN",
            "warning",
            "code.dirty",
            "not known whether the working tree had uncommitted changes",
            "record with the launcher, which checks the tree and stores the diff",
        )
    elif c.dirty and c.diff_sha256 is None:
        yield Gap(
            "CODE_DIRTY_NO_DIFF",
            "critical",
            "code.diff_sha256",
            "the tree had uncommitted changes and no diff was stored: the code is lost",
            "commit before training, or record with the launcher, which stores the diff",
        )
    elif c.dirty:
        yield Gap(
            "CODE_DIRTY_DIFF_STORED",
            "info",
            "code.diff_sha256",
            "trained from uncommitted changes; the stored diff is applied on replay",
            "commit before training so the code has a name others can fetch",
        )
    run_untracked = _untracked_in_command(m)
    if run_untracked:
        yield Gap(
            "COMMAND_FILE_UNTRACKED",
            "critical",
            "code.untracked",
            f"the command runs {', '.join(run_untracked[:3])}, which is not in the commit:"
            " a replay from the recorded commit cannot run it",
            "commit it (or record from a commit that has it) and record again",
        )
    if c.untracked:
        shown = ", ".join(c.untracked[:3]) + (" ..." if len(c.untracked) > 3 else "")
        yield Gap(
            "CODE_UNTRACKED_FILES",
            "warning",
            "code.untracked",
            f"{len(c.untracked)} untracked file(s) were present and are not in the commit: {shown}",
            "add them to git (or .gitignore them) so the replay sees the same tree",
        )
    if c.repo_url is None:
        yield Gap(
            "CODE_NO_REMOTE",
            "info",
            "code.repo_url",
            "the repository has no remote: only this host can supply the commit",
            "push the commit to a shared remote",
        )


# -- data -----------------------------------------------------------------------------


@rule
def data_rules(m: RunManifest) -> Iterator[Gap]:
    for i, d in enumerate(m.data):
        if d.sha256 is None:
            yield Gap(
                "DATA_NO_HASH",
                "critical",
                f"data[{i}].sha256",
                f"data input {d.name!r} ({d.path}) has no content hash",
                "record data with --data PATH so its content hash is taken",
            )


# -- randomness -----------------------------------------------------------------------


@rule
def seed_rules(m: RunManifest) -> Iterator[Gap]:
    r = m.randomness
    sources = {"python": r.python, "numpy": r.numpy, "torch": r.torch}
    if _has_gpu(m):
        sources["cuda"] = r.cuda
    if r.seed is None and all(v is None for v in sources.values()):
        yield Gap(
            "SEED_UNKNOWN",
            "critical",
            "randomness.seed",
            "no seed is recorded: initial weights and data order cannot be replayed",
            "call replay_tui.seed_everything(seed) or pass --seed to the launcher",
        )
    else:
        for name, value in sources.items():
            if value is None:
                yield Gap(
                    "SEED_SOURCE_UNKNOWN",
                    "warning",
                    f"randomness.{name}",
                    f"the {name} random generator is not known to be seeded",
                    "use replay_tui.seed_everything(), which seeds every source and records it",
                )
    env_hash_seed = m.env.get("PYTHONHASHSEED")
    if r.python_hash_seed is None and env_hash_seed is None:
        yield Gap(
            "PYTHONHASHSEED_UNSET",
            "warning",
            "randomness.python_hash_seed",
            "PYTHONHASHSEED was not set: set and dict iteration order can vary between runs",
            "export PYTHONHASHSEED=0 (the launcher sets it when --seed is given)",
        )


@rule
def framework_rules(m: RunManifest) -> Iterator[Gap]:
    """What the framework files a run wrote said against what it was told, and the
    framework files that gave nothing (``replay_tui.capture.frameworks``)."""
    r = m.randomness
    if r.seed_handed is not None and r.seed is not None and r.seed_handed != r.seed:
        yield Gap(
            "SEED_CONTRADICTED",
            "critical",
            "randomness.seed_handed",
            f"handed {r.seed_handed}, the program seeded {r.seed}: record --seed was not"
            " the seed the run used (its own record says so)",
            "give the program its seed the way it reads one (its --seed option), or drop"
            " record --seed",
        )
    for path, why in sorted(m.outputs.metric_files_unread.items()):
        yield Gap(
            "METRICS_SOURCE_EMPTY",
            "warning",
            "outputs.metric_files_unread",
            f"metrics file {escape_control(path)} gave no metric: {escape_control(why)}",
            "check what the framework wrote there; its numbers are not in the manifest",
        )


# -- determinism ----------------------------------------------------------------------


@rule
def determinism_rules(m: RunManifest) -> Iterator[Gap]:
    d = m.determinism
    if d.deterministic_algorithms is None:
        yield Gap(
            "DETERMINISM_UNKNOWN",
            "warning",
            "determinism.deterministic_algorithms",
            "not known whether deterministic algorithms were enforced",
            "call replay_tui.deterministic() in the training code",
        )
    elif not d.deterministic_algorithms:
        yield Gap(
            "DETERMINISM_OFF",
            "warning",
            "determinism.deterministic_algorithms",
            "deterministic algorithms were off: some kernels may give different bits each run",
            "call replay_tui.deterministic() (torch.use_deterministic_algorithms(True))",
        )
    if d.cudnn_benchmark:
        yield Gap(
            "CUDNN_BENCHMARK_ON",
            "warning",
            "determinism.cudnn_benchmark",
            "cudnn.benchmark was on: convolution algorithms are chosen by timing, per run",
            "set torch.backends.cudnn.benchmark = False (replay_tui.deterministic() does)",
        )
    if _has_gpu(m):
        if d.cublas_workspace_config is None and "CUBLAS_WORKSPACE_CONFIG" not in m.env:
            yield Gap(
                "CUBLAS_WORKSPACE_UNSET",
                "critical",
                "determinism.cublas_workspace_config",
                "CUBLAS_WORKSPACE_CONFIG was unset on CUDA: cuBLAS matmuls are not deterministic",
                "export CUBLAS_WORKSPACE_CONFIG=:4096:8 before CUDA starts",
            )
        if d.allow_tf32:
            yield Gap(
                "TF32_ON",
                "warning",
                "determinism.allow_tf32",
                "TF32 matmuls were allowed: results depend on the GPU generation",
                "disable TF32 (replay_tui.deterministic() does)"
                " or accept EQUIVALENT, not IDENTICAL",
            )
    if d.nondeterministic_ops:
        ops = ", ".join(d.nondeterministic_ops[:5])
        yield Gap(
            "NONDETERMINISTIC_OPS",
            "warning",
            "determinism.nondeterministic_ops",
            f"{len(d.nondeterministic_ops)} nondeterministic op(s) ran: {ops}",
            "replace these ops or expect replays to differ in the last bits",
        )


# -- environment and hardware ---------------------------------------------------------


@rule
def environment_rules(m: RunManifest) -> Iterator[Gap]:
    e, h = m.environment, m.hardware
    if e.packages is None:
        yield Gap(
            "PACKAGES_MISSING",
            "warning",
            "environment.packages",
            "the installed package list was not recorded",
            "record with the launcher, which lists the interpreter's packages",
        )
    if e.python_version is None:
        yield Gap(
            "PYTHON_VERSION_UNKNOWN",
            "warning",
            "environment.python_version",
            "the Python version is not recorded",
            "record with the launcher or the SDK",
        )
    if h.cpu_model is None and h.gpus is None:
        yield Gap(
            "HARDWARE_UNRECORDED",
            "warning",
            "hardware",
            "the hardware (CPU, GPUs) was not recorded",
            "record with the launcher, which probes CPU and GPUs",
        )
    if _has_gpu(m):
        if h.driver_version is None:
            yield Gap(
                "DRIVER_UNRECORDED",
                "warning",
                "hardware.driver_version",
                "GPUs were used but the driver version is not recorded",
                "record with the launcher on the GPU host (it reads NVML / nvidia-smi)",
            )
        if e.cuda_version is None:
            # Why it cannot be known, where the manifest says: a torch recorded with no
            # CUDA is a CPU (or ROCm) build; a package list without torch has none to ask.
            torchless = e.packages is not None and not any(
                p.partition("==")[0].lower() == "torch" for p in e.packages
            )
            if e.torch_version is not None:
                why = f": the run's torch {e.torch_version} is built without CUDA (a CPU build)"
                fix = "install a CUDA build of torch if the run was meant to use the GPU"
            elif torchless:
                why = ": torch is not installed in the run's environment (nothing to ask)"
                fix = "if the run uses CUDA without torch, record its version with --tag cuda=..."
            else:
                why = ""
                fix = "use the SDK in the training code: it records torch's CUDA and cuDNN versions"
            yield Gap(
                "CUDA_VERSION_UNKNOWN",
                "warning",
                "environment.cuda_version",
                f"GPUs were used but the CUDA version is not recorded{why}",
                fix,
            )


def _untracked_in_command(m: RunManifest) -> list[str]:
    """Untracked files the command names (``python train.py``: ``train.py``), as paths
    from the repository root (``code.untracked``'s form)."""
    import posixpath

    untracked = set(m.code.untracked)
    if not untracked:
        return []
    base = m.workdir if m.workdir and m.workdir != "." else ""
    found: list[str] = []
    for token in m.argv:
        if token.startswith("-") or "\x00" in token:
            continue
        path = posixpath.normpath(posixpath.join(base, token.split("=", 1)[-1]))
        if path in untracked and path not in found:
            found.append(path)
    return found


# -- outputs --------------------------------------------------------------------------


@rule
def output_rules(m: RunManifest) -> Iterator[Gap]:
    o = m.outputs
    for i, a in enumerate(o.artifacts):
        if a.stale is not None:
            # the run did not write it: its claimed output is not its own when it says it
            # succeeded; a run that failed is expected to have no output at all
            yield Gap(
                "ARTIFACT_STALE",
                "critical" if m.status == "succeeded" else "warning",
                f"outputs.artifacts[{i}]",
                f"artifact {a.path} was not written by this run (stale: {a.stale})",
                "start each run from an empty output folder, or give each run its own,"
                " so an earlier run's files cannot pass for its output",
            )
        elif a.sha256 is None:
            yield Gap(
                "ARTIFACT_NO_HASH",
                "critical",
                f"outputs.artifacts[{i}].sha256",
                f"artifact {a.path} has no hash: a replay cannot be checked against it",
                "write outputs as regular files in the working folder and record them with"
                " --artifact GLOB (a link or special file is refused unhashed: the recorder"
                " says why)",
            )
    for i, glob in enumerate(m.capture.artifact_globs if m.capture else []):
        pats = glob_parts(glob)  # the collection's own matcher: a glob it matched is listed
        if (
            m.status == "succeeded"
            and pats
            and not any(glob_match(a.path.split("/"), pats) for a in o.artifacts)
        ):
            yield Gap(
                "ARTIFACT_GLOB_EMPTY",
                "warning",
                f"capture.artifact_globs[{i}]",
                f"artifact glob {escape_control(glob)!r} matched no file: nothing it names"
                " was recorded",
                "check the glob against what the run writes, relative to its working folder"
                " (** matches every file at every depth)",
            )
    for name, steps in sorted(o.metric_nonfinite.items()):
        if steps:
            shown = ", ".join(str(x) for x in steps[:5]) + (" …" if len(steps) > 5 else "")
            yield Gap(
                "METRIC_NONFINITE",
                "warning",
                f"outputs.metric_nonfinite.{name}",
                f"metric {name} was NaN or infinite at {len(steps)} step(s) ({shown}): the"
                " history holds its finite values only",
                "look at the run's log around those steps; a replay shows whether it recurs",
            )
    if m.status == "succeeded" and not o.artifacts:
        yield Gap(
            "NO_ARTIFACTS",
            "warning",
            "outputs.artifacts",
            "no artifacts recorded: nothing can be compared bit for bit",
            "record the checkpoint with --artifact or run.log_artifact()",
        )
    if m.status == "succeeded" and not o.metrics and not o.metric_history:
        yield Gap(
            "NO_METRICS",
            "info",
            "outputs.metrics",
            "no metrics recorded: divergence cannot be located by step",
            "log metrics with run.log_metric() or the launcher's --metric-regex",
        )
    if not m.config:
        yield Gap(
            "CONFIG_MISSING",
            "warning",
            "config",
            "no hyperparameters recorded",
            "call run.log_config() with every hyperparameter",
        )
    if m.status != "succeeded":
        yield Gap(
            "RUN_NOT_SUCCEEDED",
            "info",
            "status",
            f"the run {m.status.replace('_', ' ')} (exit code {m.exit_code})",
            "read the log tail; a replay reruns it to show the failure again, but with no"
            " outputs to compare its verdict is INCOMPLETE, never IDENTICAL",
        )


@rule
def config_source_rules(m: RunManifest) -> Iterator[Gap]:
    cs = m.config_source
    if cs is not None and cs.source == "argv":
        yield Gap(
            "CONFIG_FROM_ARGV",
            "info",
            "config_source",
            "the config was read from the command line, not reported by the program:"
            " defaults the program filled in are not in it",
            "call run.log_config() with the full resolved config",
        )
    for i, f in enumerate(cs.files if cs is not None else []):
        if f.in_repo is None:
            yield Gap(
                "CONFIG_FILE_OUTSIDE_REPO",
                "warning",
                f"config_source.files[{i}]",
                f"config file {f.path} lies outside the repository: only its hash is"
                " recorded, another host may not have it",
                "commit the config file to the repository",
            )
    src = m.source
    if src is not None:
        yield Gap(
            "IMPORTED_RUN",
            "info",
            "source",
            f"imported from {src.tracker} (run {src.run_id}): only what the tracker"
            " recorded is known",
            "record new runs with replay-tui record so every input is captured",
        )
        if not m.argv:
            yield Gap(
                "IMPORT_NO_COMMAND",
                "warning",
                "argv",
                f"{src.tracker} recorded no command that runs from a checkout:"
                " the run cannot be replayed as it is",
                "record the run with replay-tui record, or log the script path relative"
                " to the repository",
            )


@rule
def replay_rules(m: RunManifest) -> Iterator[Gap]:
    r = m.replay
    if m.kind != "replay" or r is None:
        return
    if not r.environment_pinned:
        yield Gap(
            "REPLAY_ENV_NOT_PINNED",
            "warning",
            "replay.backend",
            "replayed with the local backend: the host's interpreter, not the recorded image",
            "replay with --backend docker to use the recorded image digest",
        )
    if r.cpu_fallback:
        yield Gap(
            "REPLAY_CPU_FALLBACK",
            "warning",
            "replay.gpus",
            "the original ran on GPUs; this replay ran on CPU (--allow-cpu)",
            "replay on a host with the recorded GPU model to expect bitwise identity",
        )
    if r.forced_data:
        yield Gap(
            "REPLAY_DATA_FORCED",
            "critical",
            "replay.forced_data",
            "data hashes did not match and the replay went on (--force-data)",
            "restore the recorded data; a replay on other data proves nothing about the run",
        )
    if r.determinism == "off":
        yield Gap(
            "REPLAY_DETERMINISM_OFF",
            "info",
            "replay.determinism",
            "this replay switched deterministic mode off on purpose (cost measurement)",
            "compare it only for the determinism cost, not as a reproduction",
        )
