#!/usr/bin/env bash
# Run one command against the private dockerd that `make test-docker` uses, then stop
# it (root). The image must exist already (`make test-docker` builds it). For example:
#
#   bash docker/with-engine.sh python bench/docker_fleet.py start 4 16 32
#   bash docker/with-engine.sh testbed run experiments/quickstart.yaml --backend docker
#
# Environment: DOCKER_DIR (default .docker), VENV (default .venv: its bin/ goes first on
# PATH, so `python` and `testbed` are the project's). The engine is stopped, and its
# mounts are released, however the command ends.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DOCKER_DIR=${DOCKER_DIR:-$ROOT/.docker}
VENV=${VENV:-$ROOT/.venv}
IMAGE=${TESTBED_IMAGE:-continuum-testbed:latest}
SOCK=$DOCKER_DIR/docker.sock
PIDFILE=$DOCKER_DIR/dockerd.pid
export DOCKER_HOST=unix://$SOCK
export PATH=$VENV/bin:$PATH
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

log() { printf '[with-engine %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
# shellcheck source=docker/engine.sh
. "$ROOT/docker/engine.sh"

[ "$(id -u)" = 0 ] || die "needs root (a private dockerd)"
[ $# -gt 0 ] || die "usage: $0 COMMAND [ARG...]"
mkdir -p "$DOCKER_DIR"
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if docker info >/dev/null 2>&1; then
    left=$(docker ps -aq --filter label=testbed.run)
    # shellcheck disable=SC2086
    [ -z "$left" ] || { log "removing leftover testbed containers"; docker rm -f $left >/dev/null; }
  fi
  stop_dockerd
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
stop_dockerd   # one left by an interrupted earlier run
start_dockerd
docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE missing: run \`make test-docker\`"
"$@"
