#!/usr/bin/env bash
# Build the framework image on top of the training image: the same torch, numpy and
# safetensors, plus Lightning (pinned as in pyproject's dev extras), so that a framework
# run can be recorded and replayed in a container. scripts/docker-env.sh runs it after
# the training image and writes its result into train-image.env.
#
# No network inside the build (docker build --network none): the wheels are downloaded
# on the host, for the image's Python (cp311, manylinux x86_64), with what the training
# image already holds as constraints (its `pip list`), and only the missing ones (~9 MB)
# go into the build. Idempotent: when the image is built and in the registry, a second
# run only checks (about 1 s).
#
# Usage: scripts/framework-image.sh [TRAIN_IMAGE]
#   TRAIN_IMAGE  the training image's tag (default: REPLAY_TUI_TRAIN_IMAGE from
#                $REPLAY_TUI_ENV_DIR/train-image.env)
#
# Environment:
#   REPLAY_TUI_ENV_DIR   state dir (default /var/lib/replay-tui-env)
#   REPLAY_TUI_PIP_ARGS  extra args for `pip download` (as for scripts/docker-env.sh)
#
# Output (stdout, two lines, for train-image.env):
#   REPLAY_TUI_FRAMEWORK_IMAGE=localhost:5000/replay-tui/train-lightning:<key16>
#   REPLAY_TUI_FRAMEWORK_DIGEST=localhost:5000/replay-tui/train-lightning@sha256:...
# Everything else goes to stderr.
set -euo pipefail

exec 3>&1 1>&2

STATE="${REPLAY_TUI_ENV_DIR:-/var/lib/replay-tui-env}"
REGISTRY_ADDR="127.0.0.1:5000"
REGISTRY_HOST="localhost:5000"
FW_REPO="replay-tui/train-lightning"
FW_REQS=(lightning==2.6.6)

log() { printf '[framework-image] %s\n' "$*" >&2; }
die() { printf '[framework-image] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "[framework-image] ERROR: command failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

case "${1:-}" in
  -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
esac
TRAIN="${1:-}"
if [[ -z "$TRAIN" ]]; then
  [[ -f "$STATE/train-image.env" ]] || die "no TRAIN_IMAGE given and no $STATE/train-image.env: run scripts/docker-env.sh"
  TRAIN=$(awk -F= '$1 == "REPLAY_TUI_TRAIN_IMAGE" {print $2}' "$STATE/train-image.env")
  [[ -n "$TRAIN" ]] || die "$STATE/train-image.env names no REPLAY_TUI_TRAIN_IMAGE"
fi
docker image inspect "$TRAIN" >/dev/null 2>&1 || die "training image $TRAIN is not in the engine: run scripts/docker-env.sh"
TRAIN_ID=$(docker image inspect --format '{{.Id}}' "$TRAIN")

# Its own lock (docker-env.sh holds .lock while it calls this script).
mkdir -p "$STATE"
exec 9>"$STATE/.framework.lock"
flock -w 1800 9 || die "another framework-image.sh run holds $STATE/.framework.lock"

# ---------------------------------------------------------------- 1. what the image holds
# Cached per training image: its `pip list` is the constraint set of the download.
FREEZE="$STATE/framework/${TRAIN_ID#sha256:}.freeze"
if [[ ! -s "$FREEZE" ]]; then
  mkdir -p "$STATE/framework"
  docker run --rm --network none "$TRAIN" python3 -m pip list --format=freeze >"$FREEZE.tmp" \
    || die "pip list in $TRAIN failed"
  mv "$FREEZE.tmp" "$FREEZE"
fi
norm() { tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/_/g'; }

# ---------------------------------------------------------------- 2. wheels
REQ_KEY=$( { printf '%s\n' "${FW_REQS[@]}" "${REPLAY_TUI_PIP_ARGS:-}"; cat "$FREEZE"; } | sha256sum | cut -c1-16)
WHEELS="$STATE/wheels/fw-$REQ_KEY"
if [[ -s "$WHEELS/SHA256SUMS" ]]; then
  log "wheels cached in $WHEELS"
else
  rm -rf "$WHEELS"; mkdir -p "$WHEELS/all"
  # pip and wheel are Debian's own (not from PyPI): never a constraint.
  grep -viE '^(pip|wheel)==' "$FREEZE" >"$WHEELS/constraints.txt"
  # The training image's own wheels (torch +cpu is not on PyPI) are found locally.
  links=()
  for d in "$STATE"/wheels/*/; do
    [[ "$d" == */fw-*/ ]] || links+=(--find-links "$d")
  done
  log "downloading wheels for Python 3.11 manylinux x86_64: ${FW_REQS[*]} (constrained to $TRAIN's packages)"
  # shellcheck disable=SC2086
  python3 -m pip download -q -d "$WHEELS/all" --only-binary=:all: \
      --python-version 3.11 --implementation cp --abi cp311 \
      --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
      "${links[@]}" -c "$WHEELS/constraints.txt" ${REPLAY_TUI_PIP_ARGS:-} "${FW_REQS[@]}" \
    || die "pip download ${FW_REQS[*]} failed"
  # Keep only what the image lacks: torch & co. are installed there already.
  installed=$(cut -d= -f1 "$FREEZE" | norm)
  for w in "$WHEELS"/all/*.whl; do
    name=$(basename "$w" | cut -d- -f1 | norm)
    grep -qx "$name" <<<"$installed" || mv "$w" "$WHEELS/"
  done
  rm -rf "$WHEELS/all"
  compgen -G "$WHEELS/lightning-2.6.6-*.whl" >/dev/null || die "no lightning 2.6.6 wheel in $WHEELS"
  if compgen -G "$WHEELS/torch-*" >/dev/null || compgen -G "$WHEELS/nvidia_*" >/dev/null; then
    die "a torch or CUDA wheel was downloaded into $WHEELS: the training image's torch must stay"
  fi
  (cd "$WHEELS" && sha256sum -- *.whl >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
fi

# ---------------------------------------------------------------- 3. image
CTX="$STATE/framework/build"
rm -rf "$CTX"; mkdir -p "$CTX/wheels"
# Two stages: the build stage installs under /opt/fw (pip --root: the packages already
# in the image satisfy their requirements and are not copied), and the image gets only
# that tree as one layer (38 MB). No wheel file stays in a layer, and torch is not
# copied again.
cat >"$CTX/Dockerfile" <<EOF
FROM $TRAIN AS build
LABEL replay-tui.stage=framework-build
COPY wheels /tmp/wheels
RUN pip install --break-system-packages --no-cache-dir --no-index --find-links /tmp/wheels \\
      --no-warn-script-location --root /opt/fw ${FW_REQS[*]}

FROM $TRAIN
COPY --from=build /opt/fw/ /
RUN python3 -B -c "import lightning, torch; print(lightning.__version__, torch.__version__)"
EOF

KEY=$( { cat "$CTX/Dockerfile"; sort -k2 "$WHEELS/SHA256SUMS"; echo "$TRAIN_ID"; } | sha256sum | cut -c1-16)
TAG="$REGISTRY_HOST/$FW_REPO:$KEY"

registry_digest() {
  curl -fsS -o /dev/null -D - -I \
      -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$REGISTRY_ADDR/v2/$FW_REPO/manifests/$KEY" 2>/dev/null \
    | tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" {print $2}'
}
has_repo_digest() {
  docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$TAG" 2>/dev/null \
    | grep -qx "$REGISTRY_HOST/$FW_REPO@$1"
}

DIGEST=""
if docker image inspect "$TAG" >/dev/null 2>&1; then
  DIGEST=$(registry_digest || true)
  if [[ -n "$DIGEST" ]] && has_repo_digest "$DIGEST"; then
    log "framework image $TAG is built and in the registry"
  else
    log "framework image $TAG exists locally; pushing"
    DIGEST=""
  fi
else
  log "building $TAG (docker build --network none)"
  (cd "$WHEELS" && sha256sum --quiet -c SHA256SUMS) || die "cached wheels in $WHEELS are corrupt; delete the directory and rerun"
  cp -l "$WHEELS"/*.whl "$CTX/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$CTX/wheels/"
  DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}" docker build --network none --pull=false --force-rm -t "$TAG" "$CTX" \
    || die "docker build failed"
  # The legacy builder keeps the build stage as a dangling image: remove it (only it).
  docker image prune -f --filter label=replay-tui.stage=framework-build >/dev/null || true
fi
rm -rf "$CTX"

if [[ -z "$DIGEST" ]]; then
  log "pushing $TAG"
  docker push "$TAG" || die "docker push $TAG failed"
  DIGEST=$(registry_digest || true)
  [[ -n "$DIGEST" ]] || die "registry has no manifest for $TAG after push"
  has_repo_digest "$DIGEST" || die "local image $TAG has no RepoDigest $DIGEST after push"
fi

printf 'REPLAY_TUI_FRAMEWORK_IMAGE=%s\nREPLAY_TUI_FRAMEWORK_DIGEST=%s\n' \
  "$TAG" "$REGISTRY_HOST/$FW_REPO@$DIGEST" >&3
