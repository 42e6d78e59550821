#!/usr/bin/env bash
# Install everything and run the whole test suite: lint, types, import contracts, pytest.
# Tests that need Docker use the real engine brought up by scripts/docker-env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test-deps
export PATH="$PWD/.venv/bin:$PATH"
# Lint, types and import contracts need only the venv: they run while the engines come up
# (mostly downloads and waiting), and their verdict is read before pytest starts.
lint_log=$(mktemp)
(
  set -e
  echo "== ruff"
  ruff check .
  ruff format --check .
  echo "== mypy"; mypy
  echo "== import contracts"; lint-imports
) >"$lint_log" 2>&1 &
lint_pid=$!
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
lint_rc=0
wait "$lint_pid" || lint_rc=$?
cat "$lint_log"
rm -f "$lint_log"
if [ "$lint_rc" != 0 ]; then echo "lint, types or import contracts failed (exit $lint_rc)" >&2; exit "$lint_rc"; fi
# Two workers (pytest-xdist) on the 2-core CI machines: the tests that drive an engine
# run one after another on one of them (the xdist group "engines",
# tests/conftest.py), the rest beside them.  REPLAY_TUI_TEST_WORKERS=0 runs serially.
echo "== pytest"; pytest -q -p no:cacheprovider -n "${REPLAY_TUI_TEST_WORKERS:-2}" --durations=30 "$@"
