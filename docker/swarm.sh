#!/usr/bin/env bash
# The swarm step of docker/e2e.sh (`make test-swarm`; `make test-docker` runs it too):
# a second private engine beside e2e.sh's, both in one Docker swarm on loopback, then
# tests/docker/test_swarm.py against it. Run by e2e.sh with its engine up and the image
# built (DOCKER_HOST is engine A's socket); always leaves the swarm on both engines and
# stops engine B by its pidfile, however the tests end.
#
#   engine A (manager): e2e.sh's, swarm listen 127.0.0.1:2377, label engine=a
#   engine B (worker):  $DOCKER_DIR/b (an empty data root each time), swarm listen
#                       127.0.0.1:2378, label engine=b
#
# The image reaches engine B through the testbed itself (--backend swarm loads it from
# the manager: docker save | docker load), which the test checks.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
: "${DOCKER_HOST:?run by docker/e2e.sh (DOCKER_HOST = engine A)}"
A_HOST=$DOCKER_HOST
A_DIR=${DOCKER_DIR:-$ROOT/.docker}
B_DIR=$A_DIR/b
PY=${VENV:-$ROOT/.venv}/bin/python
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-1200}

log() { printf '[swarm %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "FAIL: $*"; exit 1; }
# shellcheck source=docker/engine.sh
. "$ROOT/docker/engine.sh"
engine_b() {  # engine_b start|stop: engine.sh's functions on engine B's folder
  ( DOCKER_DIR=$B_DIR SOCK=$B_DIR/docker.sock PIDFILE=$B_DIR/dockerd.pid \
    DOCKER_HOST=unix://$B_DIR/docker.sock; "${1}_dockerd" )
}
B_HOST=unix://$B_DIR/docker.sock

leave() {  # leave the swarm on both engines (B first), quietly
  DOCKER_HOST=$B_HOST docker swarm leave --force >/dev/null 2>&1 || true
  DOCKER_HOST=$A_HOST docker swarm leave --force >/dev/null 2>&1 || true
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [ -S "$B_DIR/docker.sock" ] && DOCKER_HOST=$B_HOST docker info >/dev/null 2>&1; then
    left=$(DOCKER_HOST=$B_HOST docker ps -aq --filter label=testbed.run)
    # shellcheck disable=SC2086
    [ -z "$left" ] || { log "removing leftover containers on engine B"; DOCKER_HOST=$B_HOST docker rm -f $left >/dev/null; }
  fi
  svc=$(DOCKER_HOST=$A_HOST docker service ls -q --filter label=testbed.run 2>/dev/null)
  # shellcheck disable=SC2086
  [ -z "$svc" ] || { log "removing leftover services"; DOCKER_HOST=$A_HOST docker service rm $svc >/dev/null; }
  log "leaving the swarm (both engines), stopping engine B"
  leave
  engine_b stop
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$B_DIR"
engine_b stop   # one left by an interrupted earlier run
rm -rf "$B_DIR/data"   # B starts empty: the testbed must load the image into it
leave
t0=$(date +%s.%N)
engine_b start
DOCKER_HOST=$A_HOST docker swarm init --advertise-addr 127.0.0.1 --listen-addr 127.0.0.1:2377 >/dev/null
token=$(DOCKER_HOST=$A_HOST docker swarm join-token -q worker)
DOCKER_HOST=$B_HOST docker swarm join --token "$token" --listen-addr 127.0.0.1:2378 \
  --advertise-addr 127.0.0.1:2378 127.0.0.1:2377 >/dev/null
a_id=$(DOCKER_HOST=$A_HOST docker info -f '{{.Swarm.NodeID}}')
b_id=$(DOCKER_HOST=$B_HOST docker info -f '{{.Swarm.NodeID}}')
DOCKER_HOST=$A_HOST docker node update --label-add engine=a "$a_id" >/dev/null
DOCKER_HOST=$A_HOST docker node update --label-add engine=b "$b_id" >/dev/null
for _ in $(seq 1 50); do
  [ "$(DOCKER_HOST=$A_HOST docker node ls -q --filter role=worker | wc -l)" -ge 1 ] && \
    DOCKER_HOST=$A_HOST docker node inspect -f '{{.Status.State}}' "$b_id" | grep -q ready && break
  sleep 0.2
done
DOCKER_HOST=$A_HOST docker node ls
log "swarm of 2 engines ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"

export TESTBED_SWARM_ENGINES="$B_HOST"
if [ -n "${SWARM_CMD:-}" ]; then   # a benchmark instead of the test (bench/swarm.py)
  log "SWARM_CMD: $SWARM_CMD"
  # shellcheck disable=SC2086
  PATH=${VENV:-$ROOT/.venv}/bin:$PATH PYTHONPATH=$ROOT $SWARM_CMD
  exit 0
fi
log "pytest tests/docker/test_swarm.py (TESTBED_SWARM_TESTS=1)"
env TESTBED_DOCKER_TESTS=1 TESTBED_SWARM_TESTS=1 TESTBED_SWARM_ENGINES="$B_HOST" \
  TESTBED_SWARM_B="$b_id" timeout "$RUN_TIMEOUT_S" "$PY" -m pytest -q -rfE -p no:cacheprovider \
  --durations=5 ${SWARM_PYTEST_ARGS:-tests/docker/test_swarm.py} > "$A_DIR/pytest-swarm.log" 2>&1 \
  || { tail -60 "$A_DIR/pytest-swarm.log"; die "tests/docker/test_swarm.py failed (log: $A_DIR/pytest-swarm.log)"; }
tail -12 "$A_DIR/pytest-swarm.log"
log "PASS"
