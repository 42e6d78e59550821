#!/usr/bin/env bash
# Bring up a local Docker environment for replay-tui on a Debian bookworm host
# (root, no Docker Hub access): Docker engine without container networking, a
# local registry on 127.0.0.1:5000, a debootstrapped base image and a CPU
# training image (torch, numpy, safetensors) pushed to that registry.
#
# Idempotent: a second run only checks that everything is there.
#
# Then the framework image (scripts/framework-image.sh: the training image plus
# Lightning), for the tests that record and replay a framework run in a container.
#
# Usage: scripts/docker-env.sh [--no-image] [--no-framework]
#   --no-image      only ensure the engine and the registry.
#   --no-framework  no framework image (train-image.env then names none).
#
# Environment:
#   REPLAY_TUI_ENV_DIR       state dir (default /var/lib/replay-tui-env)
#   REPLAY_TUI_DEBIAN_MIRROR Debian mirror for debootstrap (default: from apt sources)
#   REPLAY_TUI_PIP_ARGS      extra args for `pip download`, e.g.
#                            "--extra-index-url https://download.pytorch.org/whl/cpu"
#
# Output: the digest reference of the training image is the last line on stdout
# and is also written to $REPLAY_TUI_ENV_DIR/train-image.env, with the framework
# image's tag and digest (REPLAY_TUI_FRAMEWORK_IMAGE / _DIGEST). Everything else
# goes to stderr.
set -euo pipefail

# Keep stdout for the result only.
exec 3>&1 1>&2

STATE="${REPLAY_TUI_ENV_DIR:-/var/lib/replay-tui-env}"
REGISTRY_ADDR="127.0.0.1:5000"
REGISTRY_HOST="localhost:5000"
BASE_IMAGE="replay-tui/base:bookworm"
TRAIN_REPO="replay-tui/train"
SUITE="bookworm"
PY_REQS=(torch==2.13.0+cpu numpy==2.4.6 safetensors==0.8.0)
WANT_IMAGE=1
WANT_FRAMEWORK=1
SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { printf '[docker-env] %s\n' "$*" >&2; }
die() { printf '[docker-env] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "[docker-env] ERROR: command failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-image) WANT_IMAGE=0 ;;
    --no-framework) WANT_FRAMEWORK=0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) die "unknown option: $1 (see --help)" ;;
  esac
  shift
done

[[ $(id -u) -eq 0 ]] || die "must run as root"
mkdir -p "$STATE"

# One run at a time (the team may call this concurrently).
exec 9>"$STATE/.lock"
flock -w 1800 9 || die "another docker-env.sh run holds $STATE/.lock"

# wait_for SECONDS DESCRIPTION CMD...: poll CMD until it succeeds or time runs out.
wait_for() {
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
  log "$what is up"
}

# daemonize LOG CMD...: start CMD in its own session, detached from us. All
# inherited fds above 2 are closed first: the daemon must not hold our lock
# (fd 9) or our caller's stdout (fd 3), or later runs / $(...) callers hang.
daemonize() {
  local logf=$1 fd; shift
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid nohup "$@" >>"$logf" 2>&1 </dev/null
  ) &
}

# ---------------------------------------------------------------- 1. packages
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker >/dev/null || missing+=(docker.io)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
if ((WANT_IMAGE)) && ! python3 -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update || die "apt-get update failed"
  apt-get install -y --no-install-recommends "${missing[@]}" || die "apt-get install ${missing[*]} failed"
fi

# ---------------------------------------------------------------- 2. engine
if docker info >/dev/null 2>&1; then
  log "docker engine already running"
else
  if pgrep -x dockerd >/dev/null; then
    log "dockerd is running but not answering yet; waiting"
  else
    # A stale pid file from a dead daemon makes dockerd refuse to start.
    if [[ -f /var/run/docker.pid ]] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
      rm -f /var/run/docker.pid
    fi
    log "starting dockerd (log: $STATE/dockerd.log)"
    # setsid+nohup: the daemon must outlive this script and its caller's session.
    # --bridge=none: containers never get a network address on this host.
    daemonize "$STATE/dockerd.log" dockerd --storage-driver=overlay2 --bridge=none --iptables=false
  fi
  if ! wait_for 60 "docker engine" docker info; then
    tail -n 20 "$STATE/dockerd.log" >&2 || true
    die "docker engine did not come up within 60 s (see $STATE/dockerd.log)"
  fi
fi

# ---------------------------------------------------------------- 3. registry
registry_up() { curl -fsS -o /dev/null "http://$REGISTRY_ADDR/v2/"; }
if registry_up 2>/dev/null; then
  log "registry already answering on $REGISTRY_ADDR"
else
  mkdir -p "$STATE/registry"
  cat >"$STATE/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $STATE/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
EOF
  log "starting docker-registry (log: $STATE/registry.log)"
  daemonize "$STATE/registry.log" docker-registry serve "$STATE/registry.yml"
  if ! wait_for 30 "registry" registry_up; then
    tail -n 20 "$STATE/registry.log" >&2 || true
    die "registry did not answer on http://$REGISTRY_ADDR/v2/ within 30 s (see $STATE/registry.log)"
  fi
fi

if ((!WANT_IMAGE)); then
  log "engine and registry ready (--no-image)"
  exit 0
fi

# ---------------------------------------------------------------- 4. base image
debian_mirror() {
  if [[ -n "${REPLAY_TUI_DEBIAN_MIRROR:-}" ]]; then echo "$REPLAY_TUI_DEBIAN_MIRROR"; return; fi
  local uri=""
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    # First deb822 stanza is the main archive (security comes later).
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [[ -z "$uri" && -f /etc/apt/sources.list ]]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

ROOTFS=""
cleanup_rootfs() {
  [[ -n "$ROOTFS" && -d "$ROOTFS" ]] || return 0
  # debootstrap may leave /proc, /sys mounted inside the target if it fails.
  local m
  for m in $(awk -v r="$ROOTFS" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" || true
  done
  rm -rf --one-file-system "$ROOTFS"
}
trap cleanup_rootfs EXIT

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  log "base image $BASE_IMAGE exists"
else
  MIRROR=$(debian_mirror)
  ROOTFS=$(mktemp -d "$STATE/rootfs.XXXXXX")
  log "debootstrap $SUITE from $MIRROR (takes a few minutes; log: $STATE/debootstrap.log)"
  if ! debootstrap --variant=minbase --include=python3,python3-pip,git \
      "$SUITE" "$ROOTFS" "$MIRROR" >"$STATE/debootstrap.log" 2>&1; then
    tail -n 30 "$STATE/debootstrap.log" >&2 || true
    die "debootstrap failed (see $STATE/debootstrap.log)"
  fi
  # Drop downloaded .debs and apt lists: not needed at run time.
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  log "importing rootfs as $BASE_IMAGE"
  tar --numeric-owner -C "$ROOTFS" -c . | docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["/bin/bash"]' \
      - "$BASE_IMAGE" >/dev/null || die "docker import of the base rootfs failed"
  cleanup_rootfs
  ROOTFS=""
fi
BASE_ID=$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE")

# ---------------------------------------------------------------- 5. training image
# Wheels are cached per requirement set; SHA256SUMS marks a complete download.
REQ_KEY=$(printf '%s\n' "${PY_REQS[@]}" "${REPLAY_TUI_PIP_ARGS:-}" | sha256sum | cut -c1-16)
WHEELS="$STATE/wheels/$REQ_KEY"
if [[ -s "$WHEELS/SHA256SUMS" ]]; then
  log "wheels cached in $WHEELS"
else
  rm -rf "$WHEELS"; mkdir -p "$WHEELS"
  log "downloading wheels for Python 3.11 manylinux x86_64: ${PY_REQS[*]}"
  # torch is pinned to its +cpu build: its metadata has no nvidia-*/triton
  # dependencies, unlike the PyPI (CUDA) wheel.
  # shellcheck disable=SC2086
  python3 -m pip download -d "$WHEELS" --only-binary=:all: \
      --python-version 3.11 --implementation cp --abi cp311 \
      --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
      ${REPLAY_TUI_PIP_ARGS:-} "${PY_REQS[@]}" \
    || die "pip download failed (note: torch==2.13.0+cpu is not on PyPI itself; set REPLAY_TUI_PIP_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu' or provide it via pip find-links)"
  compgen -G "$WHEELS/torch-2.13.0+cpu-*.whl" >/dev/null || die "no torch 2.13.0+cpu wheel in $WHEELS"
  if compgen -G "$WHEELS/nvidia_*" >/dev/null || compgen -G "$WHEELS/triton-*" >/dev/null; then
    die "CUDA wheels were downloaded into $WHEELS; refusing to build a GPU image"
  fi
  (cd "$WHEELS" && sha256sum -- *.whl >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
fi

CTX="$STATE/build"
rm -rf "$CTX"; mkdir -p "$CTX/wheels"
# Two stages so the wheel files (~215 MB) do not remain in a layer of the image.
cat >"$CTX/Dockerfile" <<EOF
FROM $BASE_IMAGE AS build
COPY wheels /tmp/wheels
# (Debian's pip installs as root into /usr/local/lib/python3.11/dist-packages;
# --prefix /usr/local would give /usr/local/local/..., which is not on sys.path.)
RUN pip install --break-system-packages --no-cache-dir --no-index --find-links /tmp/wheels \\
      ${PY_REQS[*]} && rm -rf /tmp/wheels

FROM $BASE_IMAGE
COPY --from=build /usr/local /usr/local
RUN python3 -c "import torch, numpy, safetensors; print(torch.__version__, numpy.__version__)"
EOF

KEY=$( { cat "$CTX/Dockerfile"; sort -k2 "$WHEELS/SHA256SUMS"; echo "$BASE_ID"; } | sha256sum | cut -c1-16)
TAG="$REGISTRY_HOST/$TRAIN_REPO:$KEY"

# Digest the registry holds for the tag (empty if none).
registry_digest() {
  curl -fsS -o /dev/null -D - -I \
      -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$REGISTRY_ADDR/v2/$TRAIN_REPO/manifests/$KEY" 2>/dev/null \
    | tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" {print $2}'
}
has_repo_digest() {
  docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$TAG" 2>/dev/null \
    | grep -qx "$REGISTRY_HOST/$TRAIN_REPO@$1"
}

DIGEST=""
if docker image inspect "$TAG" >/dev/null 2>&1; then
  DIGEST=$(registry_digest || true)
  if [[ -n "$DIGEST" ]] && has_repo_digest "$DIGEST"; then
    log "training image $TAG is built and in the registry"
  else
    log "training image $TAG exists locally; pushing"
    DIGEST=""
  fi
else
  log "building $TAG (docker build --network none)"
  cp -l "$WHEELS"/*.whl "$CTX/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$CTX/wheels/"
  (cd "$WHEELS" && sha256sum --quiet -c SHA256SUMS) || die "cached wheels in $WHEELS are corrupt; delete the directory and rerun"
  DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}" docker build --network none --pull=false --force-rm -t "$TAG" "$CTX" \
    || die "docker build failed"
fi
rm -rf "$CTX"

if [[ -z "$DIGEST" ]]; then
  log "pushing $TAG"
  docker push "$TAG" || die "docker push $TAG failed"
  DIGEST=$(registry_digest || true)
  [[ -n "$DIGEST" ]] || die "registry has no manifest for $TAG after push"
  has_repo_digest "$DIGEST" || die "local image $TAG has no RepoDigest $DIGEST after push"
fi

# ---------------------------------------------------------------- 6. framework image
FW_ENV=""
if ((WANT_FRAMEWORK)); then
  FW_ENV=$(bash "$SCRIPTS/framework-image.sh" "$TAG") || die "scripts/framework-image.sh failed"
fi

# ---------------------------------------------------------------- 7. result
REF="$REGISTRY_HOST/$TRAIN_REPO@$DIGEST"
{
  printf 'REPLAY_TUI_TRAIN_IMAGE=%s\nREPLAY_TUI_TRAIN_DIGEST=%s\n' "$TAG" "$REF"
  [[ -z "$FW_ENV" ]] || printf '%s\n' "$FW_ENV"
} >"$STATE/train-image.env.tmp"
mv "$STATE/train-image.env.tmp" "$STATE/train-image.env"
log "wrote $STATE/train-image.env"
echo "$REF" >&3
