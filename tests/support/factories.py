"""Realistic run manifests for tests and benchmarks.

Every group of a schema-v1 manifest is filled the way a real recorded training run
fills it: a 40-hex commit, an image pinned by digest, hashed datasets, a full
hyperparameter map with its ``config_hash``, every seed, the determinism switches, about
150 pinned packages, an 8-GPU host, hashed artifacts, final metrics and about 100 steps of
metric history.  Output is deterministic for a given ``(index, seed)``.
"""

from __future__ import annotations

import copy
import hashlib
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from storage.manifest import RunManifest, config_hash, manifest_from_data

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
EPOCH = datetime(2025, 3, 1, 8, 0, 0, tzinfo=UTC)

MODELS = ("resnet50", "vit-b16", "bert-base", "gpt2-small", "llama-mini", "unet", "whisper-tiny")
DATASETS = ("imagenet", "cifar100", "wikitext103", "librispeech", "coco", "openwebtext")
TEAMS = ("vision", "speech", "nlp", "research", "platform")
OWNERS = ("alice", "bob", "carol", "dmitri", "esther", "farid", "grace", "hiro")
PURPOSES = ("baseline", "ablation", "sweep", "finetune", "pretrain", "repro", "drill")
OPTIMIZERS = ("adamw", "sgd", "lion", "adafactor")


def _words(text: str) -> list[str]:
    return text.split()


_PKG_NAMES = _words(
    "absl-py aiohttp aiosignal annotated-types antlr4-python3-runtime anyio appdirs "
    "attrs av black blinker boto3 botocore cachetools certifi cffi charset-normalizer "
    "click cloudpickle cmake colorama contourpy cryptography cycler datasets decorator "
    "deepspeed dill docker-pycreds einops evaluate exceptiongroup fairscale filelock "
    "flash-attn fonttools frozenlist fsspec gitdb gitpython google-auth grpcio h11 h5py "
    "hjson httpcore httpx huggingface-hub hydra-core idna imageio importlib-metadata "
    "iniconfig jinja2 jmespath joblib jsonschema kiwisolver lightning lightning-utilities "
    "llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl mpmath msgpack "
    "multidict multiprocess mypy-extensions networkx ninja nltk numba numpy nvidia-cublas-cu12 "
    "nvidia-cuda-cupti-cu12 nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 "
    "nvidia-cudnn-cu12 nvidia-cufft-cu12 nvidia-curand-cu12 nvidia-cusolver-cu12 "
    "nvidia-cusparse-cu12 nvidia-nccl-cu12 nvidia-nvjitlink-cu12 nvidia-nvtx-cu12 "
    "omegaconf opencv-python-headless packaging pandas pathspec pillow platformdirs "
    "pluggy portalocker protobuf psutil py-cpuinfo pyarrow pyasn1 pyasn1-modules "
    "pycparser pydantic pydantic-core pygments pyparsing pytest python-dateutil pytz "
    "pyyaml regex requests rich rsa s3transfer safetensors scikit-learn scipy "
    "sentencepiece sentry-sdk setproctitle setuptools six smmap sniffio soundfile "
    "sympy tabulate tensorboard tensorboard-data-server termcolor threadpoolctl "
    "tiktoken timm tokenizers tomli torch torchaudio torchmetrics torchvision tqdm "
    "transformers triton typing-extensions tzdata urllib3 wandb werkzeug wheel xxhash "
    "yarl zipp"
)

_ENV_CACHE: dict[int, tuple[list[str], str]] = {}


def ulid(ms: int, rnd: random.Random) -> str:
    """A ULID (26 Crockford base32 characters): 48-bit milliseconds, 80 random bits."""
    value = (ms << 80) | rnd.getrandbits(80)
    out = []
    for _ in range(26):
        out.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(out))


def hexdigest(rnd: random.Random, n: int = 64) -> str:
    return f"{rnd.getrandbits(n * 4):0{n}x}"


def timestamp(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def packages(variant: int) -> tuple[list[str], str]:
    """One of a few pinned environments (teams share images): ~150 name==version lines."""
    if variant not in _ENV_CACHE:
        rnd = random.Random(10_000 + variant)
        pkgs = sorted(
            f"{name}=={rnd.randint(0, 9)}.{rnd.randint(0, 40)}.{rnd.randint(0, 20)}"
            for name in _PKG_NAMES
        )
        digest = hashlib.sha256("\n".join(pkgs).encode()).hexdigest()
        _ENV_CACHE[variant] = (pkgs, digest)
    pkgs, digest = _ENV_CACHE[variant]
    return list(pkgs), digest


def _history(rnd: random.Random, steps: int, start: float, end: float) -> list[list[float]]:
    out: list[list[float]] = []
    for k in range(steps):
        frac = k / max(1, steps - 1)
        value = start + (end - start) * (1 - (1 - frac) ** 2) + rnd.gauss(0, 0.01)
        out.append([(k + 1) * 50, round(value, 6)])
    return out


def realistic_manifest(i: int = 0, *, seed: int = 0, history_steps: int = 100) -> dict[str, Any]:
    """A valid, unsealed (no ``manifest_sha256``) manifest dict for run number ``i``."""
    rnd = random.Random(seed * 1_000_003 + i)
    started = EPOCH + timedelta(minutes=7 * i, milliseconds=rnd.randint(0, 59_999))
    run_id = ulid(int(started.timestamp() * 1000), rnd)
    duration = round(rnd.uniform(300, 86_400), 3)
    ended = started + timedelta(seconds=duration)
    model = rnd.choice(MODELS)
    dataset = rnd.choice(DATASETS)
    team = rnd.choice(TEAMS)
    purpose = rnd.choice(PURPOSES)
    lr = rnd.choice((1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 0.01, 0.1))
    batch = rnd.choice((32, 64, 128, 256, 512, 1024))
    world = rnd.choice((1, 2, 4, 8))
    variant = rnd.randrange(6)
    pkgs, pkgs_sha = packages(variant)
    run_seed = rnd.randrange(2**31)
    config: dict[str, Any] = {
        "model": {
            "arch": model,
            "depth": rnd.choice((12, 18, 24, 50)),
            "width": rnd.choice((256, 512, 768, 1024)),
            "dropout": rnd.choice((0.0, 0.1, 0.2)),
            "activation": rnd.choice(("gelu", "relu", "silu")),
            "norm": "layernorm",
        },
        "data": {
            "name": dataset,
            "batch_size": batch,
            "num_workers": 8,
            "shuffle": True,
            "augment": ["random_crop", "hflip"] if team == "vision" else [],
            "max_length": rnd.choice((128, 512, 1024, 2048)),
        },
        "optimizer": {
            "name": rnd.choice(OPTIMIZERS),
            "lr": lr,
            "betas": [0.9, 0.999],
            "eps": 1e-8,
            "weight_decay": rnd.choice((0.0, 0.01, 0.05)),
        },
        "scheduler": {"name": "cosine", "warmup_steps": rnd.choice((0, 500, 2000)), "min_lr": 0},
        "trainer": {
            "max_steps": 5000,
            "grad_clip": 1.0,
            "grad_accum": rnd.choice((1, 2, 4)),
            "precision": "bf16",
            "eval_every": 500,
            "log_every": 50,
            "world_size": world,
        },
        "seed": run_seed,
        "label_smoothing": rnd.choice((0.0, 0.1)),
        "ema_decay": 0.9999,
        "notes": f"{purpose} run for {team}",
    }
    gpus = [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "memory_mb": 81559,
            "compute_capability": "9.0",
            "uuid": f"GPU-{hexdigest(rnd, 8)}-{hexdigest(rnd, 4)}-{hexdigest(rnd, 4)}",
        }
        for _ in range(world)
    ]
    loss_hist = _history(rnd, history_steps, 6.5, 1.8 + rnd.random())
    acc_hist = _history(rnd, history_steps, 0.01, 0.6 + 0.3 * rnd.random())
    commit = hexdigest(rnd, 40)
    image_digest = "sha256:" + hexdigest(rnd)
    name = f"{model}-{dataset}-{purpose}-lr{lr:g}-bs{batch}"
    data = [
        {
            "name": f"{dataset}-train",
            "path": f"data/{dataset}/train",
            "sha256": hexdigest(rnd),
            "size_bytes": rnd.randrange(10**9, 2 * 10**11),
            "file_count": rnd.randrange(1_000, 1_300_000),
            "version": f"v{rnd.randint(1, 4)}",
        },
        {
            "name": f"{dataset}-val",
            "path": f"data/{dataset}/val",
            "sha256": hexdigest(rnd),
            "size_bytes": rnd.randrange(10**7, 10**10),
            "file_count": rnd.randrange(100, 50_000),
            "version": f"v{rnd.randint(1, 4)}",
        },
    ]
    return {
        "schema_version": 1,
        "run_id": run_id,
        "name": name,
        "kind": "original",
        "replay_of": None,
        "status": "succeeded",
        "exit_code": 0,
        "started_at": timestamp(started),
        "ended_at": timestamp(ended),
        "duration_s": duration,
        "tags": {"team": team, "owner": rnd.choice(OWNERS), "purpose": purpose},
        "argv": [
            "python",
            "-m",
            "train",
            "--config",
            f"configs/{model}_{dataset}.yaml",
            f"--lr={lr:g}",
            f"--batch-size={batch}",
            f"--seed={run_seed}",
        ],
        "workdir": ".",
        "env": {
            "PYTHONHASHSEED": "0",
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(world)),
            "NCCL_DEBUG": "WARN",
            "NCCL_IB_DISABLE": "0",
            "OMP_NUM_THREADS": "8",
            "WANDB_MODE": "offline",
        },
        "code": {
            "repo_url": f"https://git.example.com/{team}/training.git",
            "commit": commit,
            "branch": rnd.choice(("main", "main", f"exp/{purpose}", "release/2025.06")),
            "dirty": False,
            "diff_sha256": None,
            "untracked": [],
        },
        "image": {
            "reference": f"registry.example.com/{team}/train:2025.{rnd.randint(1, 12):02d}",
            "digest": image_digest,
            "image_id": "sha256:" + hexdigest(rnd),
            "platform": "linux/amd64",
        },
        "data": data,
        "config": config,
        "config_hash": config_hash(config),
        "randomness": {
            "seed": run_seed,
            "python": run_seed,
            "numpy": run_seed,
            "torch": run_seed,
            "cuda": run_seed,
            "dataloader_workers": run_seed,
            "python_hash_seed": "0",
        },
        "determinism": {
            "deterministic_algorithms": True,
            "cudnn_deterministic": True,
            "cudnn_benchmark": False,
            "cublas_workspace_config": ":4096:8",
            "allow_tf32": False,
            "mixed_precision": "bf16",
            "nondeterministic_ops": [],
        },
        "environment": {
            "python_version": "3.11.9",
            "packages": pkgs,
            "packages_sha256": pkgs_sha,
            "torch_version": "2.4.1+cu124",
            "cuda_version": "12.4",
            "cudnn_version": "9.1.0",
            "nccl_version": "2.20.5",
            "os": "Ubuntu 22.04.4 LTS",
            "kernel": "5.15.0-105-generic",
            "hostname": f"gpu-node-{rnd.randint(1, 64):03d}",
        },
        "hardware": {
            "cpu_model": "AMD EPYC 9654 96-Core Processor",
            "cpu_count": 192,
            "gpus": gpus,
            "gpu_count": world,
            "driver_version": "550.54.15",
            "interconnect": "NVLink" if world > 1 else None,
        },
        "outputs": {
            "artifacts": [
                {
                    "path": "checkpoints/final.pt",
                    "sha256": hexdigest(rnd),
                    "size_bytes": rnd.randrange(10**8, 10**10),
                    "kind": "checkpoint",
                    "tensor_sha256": hexdigest(rnd),
                },
                {
                    "path": "checkpoints/best.safetensors",
                    "sha256": hexdigest(rnd),
                    "size_bytes": rnd.randrange(10**8, 10**10),
                    "kind": "checkpoint",
                    "tensor_sha256": hexdigest(rnd),
                },
                {
                    "path": "logs/train.log",
                    "sha256": hexdigest(rnd),
                    "size_bytes": rnd.randrange(10**4, 10**7),
                    "kind": "log",
                    "tensor_sha256": None,
                },
                {
                    "path": "metrics.json",
                    "sha256": hexdigest(rnd),
                    "size_bytes": rnd.randrange(500, 50_000),
                    "kind": "metrics",
                    "tensor_sha256": None,
                },
            ],
            "metrics": {
                "loss": loss_hist[-1][1],
                "accuracy": acc_hist[-1][1],
                "val_loss": round(loss_hist[-1][1] + rnd.uniform(0, 0.3), 6),
                "val_accuracy": round(acc_hist[-1][1] - rnd.uniform(0, 0.05), 6),
                "throughput_samples_s": round(rnd.uniform(500, 20_000), 2),
            },
            "metric_history": {"loss": loss_hist, "accuracy": acc_hist},
            "log_sha256": hexdigest(rnd),
            "log_tail": f"step 5000 loss {loss_hist[-1][1]:.4f}\ntraining finished\n",
        },
        "capture": {
            "artifact_globs": ["checkpoints/*.pt", "checkpoints/*.safetensors", "logs/*.log"],
            "metrics_file": "metrics.json",
            "metric_regex": [r"step (?P<step>\d+) loss (?P<value>[0-9.]+)"],
            "metric_name": "loss",
            "output_dirs": ["checkpoints", "logs"],
        },
        "replay": None,
        "integrity": {"manifest_sha256": None, "signature": None},
    }


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set fields by name; ``code__commit=...`` reaches into nested groups.

    A changed ``config`` gets a fresh ``config_hash`` unless ``config_hash`` is also given.
    """
    out = copy.deepcopy(data)
    for key, value in overrides.items():
        *parents, leaf = key.split("__")
        target = out
        for p in parents:
            target = target[p]
        target[leaf] = value
    if any(k.split("__")[0] == "config" for k in overrides) and "config_hash" not in overrides:
        out["config_hash"] = config_hash(out["config"]) if out["config"] else None
    return out


def seal(data: dict[str, Any]) -> dict[str, Any]:
    """The dict with ``config_hash`` and ``integrity.manifest_sha256`` filled in."""
    return model(data).sealed().model_dump(mode="json")


def model(data: dict[str, Any]) -> RunManifest:
    return manifest_from_data(data)
