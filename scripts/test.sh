#!/usr/bin/env bash
# Install everything and run the whole test suite: lint, types, import contracts, pytest.
# Tests that need Docker use the real engine brought up by scripts/docker-env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test-deps
if [ "${REPLAY_TUI_NO_DOCKER:-0}" != "1" ]; then
  bash scripts/docker-env.sh >&2
  set -a; . "${REPLAY_TUI_ENV_DIR:-/var/lib/replay-tui-env}/train-image.env"; set +a
fi
# Tests that replay with Podman or Apptainer use the runtimes of these scripts.
if [ "${REPLAY_TUI_NO_PODMAN:-0}" != "1" ]; then
  bash scripts/podman-env.sh >&2
fi
if [ "${REPLAY_TUI_NO_APPTAINER:-0}" != "1" ]; then
  bash scripts/apptainer-env.sh >&2
fi
# Tests that need Slurm use the one-node cluster of scripts/slurm-env.sh (jobs run Docker).
if [ "${REPLAY_TUI_NO_SLURM:-0}" != "1" ]; then
  bash scripts/slurm-env.sh >&2
fi
bash scripts/cosign-env.sh >&2  # cosign, the independent verifier of the SLSA provenance
export PATH="$PWD/.venv/bin:$PATH"
# One command per line: under set -e a failure inside an && list would not stop the run.
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"; mypy
echo "== import contracts"; lint-imports
# Two workers (pytest-xdist) on the 2-core CI machines: the tests that drive an engine
# run one after another on one of them (the xdist group "engines",
# tests/conftest.py), the rest beside them.  REPLAY_TUI_TEST_WORKERS=0 runs serially.
echo "== pytest"; pytest -q -p no:cacheprovider -n "${REPLAY_TUI_TEST_WORKERS:-2}" --durations=30 "$@"
