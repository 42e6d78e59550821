#!/usr/bin/env bash
# The fast loop: every test that needs no container engine and no cluster (no Docker,
# Slurm, Podman or Apptainer), on two workers.  Arguments go to pytest: a folder, -k, -x.
# The whole suite, engines included, is scripts/test.sh (what .ci/run runs).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/pytest -q -p no:cacheprovider -n "${REPLAY_TUI_TEST_WORKERS:-2}" \
  -m "not docker and not slurm and not podman and not apptainer" "$@"
