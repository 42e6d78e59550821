#!/usr/bin/env bash
# Judging real GPU training against its own noise (not part of CI: there is no GPU there).
#
# karpathy/nanoGPT's own train.py, shakespeare_char, uninstrumented, recorded with
# --metric-regex on the local backend:
#   1. record the run;
#   2. replay it 3 times (--times 3): the noise floor is measured and stored, and the
#      original is judged against it (expected: WITHIN_NOISE, exit 0);
#   3. record the same command again and compare it with the original (judged against the
#      stored floor: WITHIN_NOISE);
#   4. change the learning rate by 20 % in a new commit, record, compare (DIVERGED, with
#      the step where the loss leaves the noise band).
# Prints each step's verdict and wall time as JSON lines; the full JSON of each command
# goes to $OUT_DIR.
#
#   bench/gpu_noise_floor.sh NANOGPT_GIT_CHECKOUT OUT_DIR [ITERS]
#
# NANOGPT_GIT_CHECKOUT: a git repository holding nanoGPT's train.py, model.py,
# configurator.py, config/train_shakespeare_char.py and data/shakespeare_char/ with its
# input.txt (prepare.py then needs no network).  replay-tui must be importable
# (PYTHONPATH) with its dependencies.  NANOGPT_ARGS: more train.py options (a smaller
# model for a dry run on a CPU: --device=cpu --n_layer=2 --n_embd=64 ...).
set -euo pipefail
src=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
iters=${3:-300}
work=$(mktemp -d /tmp/gpu-noise.XXXXXX)
cp -a "$src" "$work/nanogpt"
cd "$work/nanogpt"
python3 data/shakespeare_char/prepare.py >/dev/null
rt() { python3 -m replay_tui --store "$work/runs.db" "$@"; }
args=(config/train_shakespeare_char.py "--max_iters=$iters" "--lr_decay_iters=$iters"
  --compile=False ${NANOGPT_ARGS:-})
record() {
  rt record --json --quiet --artifact 'out-shakespeare-char/ckpt.pt' \
    --data data/shakespeare_char \
    --metric-regex 'iter (?P<step>\d+): (?P<name>loss) (?P<value>[0-9.]+)' \
    --metric-regex 'step (?P<step>\d+): train loss [0-9.]+, (?P<name>val) loss (?P<value>[0-9.]+)' \
    -- python3 train.py "${args[@]}"
}
say() { printf '{"step": "%s", "seconds": %s, "exit": %s, "verdicts": "%s"}\n' "$@"; }
now() { date +%s%N; }
since() { local ms=$((($(now) - $1) / 1000000)); printf '%d.%03d' $((ms / 1000)) $((ms % 1000)); }
verdicts() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(",".join(
  [r["verdict"] or r["replay_status"] for r in d["replays"]] if "replays" in d else [d["verdict"]]))' "$1"; }
run_id() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$1"; }
# Records the command again ($out/record_$1.json), compares that run with the original
# ($out/compare_$2.json) and says step $3 with the comparison's exit and verdict; the new
# run's id is left in $rid.
record_and_compare() {
  local t0 rc
  t0=$(now)
  record >"$out/record_$1.json"
  rid=$(run_id "$out/record_$1.json")
  set +e
  rt compare "$orig" "$rid" --json >"$out/compare_$2.json"
  rc=$?
  set -e
  say "$3" "$(since "$t0")" "$rc" "$(verdicts "$out/compare_$2.json")"
}

t0=$(now)
record >"$out/record_original.json"
orig=$(run_id "$out/record_original.json")
say record "$(since "$t0")" 0 "-"

t0=$(now)
set +e
rt replay "$orig" --backend local --times 3 --quiet --json >"$out/replay_times3.json" 2>"$out/replay_times3.err"
rc=$?
set -e
say "replay --times 3" "$(since "$t0")" "$rc" "$(verdicts "$out/replay_times3.json")"

record_and_compare again same "same config, compared"

sed -i 's/^learning_rate = 1e-3/learning_rate = 1.2e-3/' config/train_shakespeare_char.py
git -c user.name=gpu -c user.email=gpu@example.invalid commit -qam "learning rate x1.2"
record_and_compare changed changed "learning rate x1.2, compared"
changed=$rid
rt show "$orig" | tail -1
rt compare "$orig" "$changed" | sed -n '1,40p' >"$out/compare_changed.txt" || true
