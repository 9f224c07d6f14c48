#!/usr/bin/env bash
# End-to-end test of the Docker image and docker-compose.yml on a real Docker engine
# (`make test-docker`; .ci/run calls it when running as root).
#
#  1. installs Debian's docker.io, docker-compose and debootstrap if missing;
#  2. starts a PRIVATE dockerd (own data/exec root, socket and pidfile under $DOCKER_DIR,
#     no bridge, no iptables): the host's Docker, if any, is not touched;
#  3. builds the base image continuum-base:bookworm with debootstrap (cached);
#  4. fills wheelhouse/ on the host (cached), builds the image from it, offline;
#  5. runs tests/docker (TESTBED_DOCKER_TESTS=1): the docker backend's limits, engine
#     faults, oom, teardown on success/error/Ctrl-C, and the local/docker parity test;
#  6. runs `docker-compose up --exit-code-from testbed testbed` with
#     EXPERIMENT=e2e-faults.yaml (docker/e2e-faults.yaml copied into a fresh project
#     folder: a crash and a time-varying link, every node a container made by the
#     runner through the SDK), and `docker compose` (v2) too when the plugin is
#     installed; checks the run record in the SQLite store, that no container is left,
#     and that a failing run fails the compose command; prints the timings;
#  7. docker/swarm.sh (RUN_SWARM=1, the default): a second private engine, both in one
#     swarm on loopback, tests/docker/test_swarm.py, then the swarm left and engine B
#     stopped;
#  8. always tears down: compose down, dockerd stopped by its pidfile.
#
# Environment: DOCKER_DIR (default .docker), RUN_TIMEOUT_S (default 1200),
# SKIP_DOCKER_TESTS=1 to run only the compose part (step 6), SKIP_COMPOSE=1 to skip it,
# PYTEST_ARGS (default tests/docker) to run some of the tests of step 5, RUN_SWARM=0 to
# skip step 7,
# KEEP_DOCKER_DATA=0 to delete the engine's data root (images) at the end,
# DOCKER_SUITE=ci for CI's bounded suite (`make test-docker`: the tests marked `ci` in
# tests/conftest.py CI, of tests/docker and of the swarm step; compose v1) or all (the
# default; `make test-docker-all`: every test, the three-way parity in the swarm step).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DOCKER_DIR=${DOCKER_DIR:-$ROOT/.docker}
BASE_IMAGE=continuum-base:bookworm   # built below with debootstrap
IMAGE=continuum-testbed:latest
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-1200}
DOCKER_SUITE=${DOCKER_SUITE:-all}
case "$DOCKER_SUITE" in ci|all) ;; *) echo "DOCKER_SUITE=$DOCKER_SUITE: ci or all" >&2; exit 2 ;; esac
VENV=${VENV:-$ROOT/.venv}
PY=$VENV/bin/python
SOCK=$DOCKER_DIR/docker.sock
PIDFILE=$DOCKER_DIR/dockerd.pid
TIMINGS=$DOCKER_DIR/timings.txt
COMPOSE_SPEC=$ROOT/docker/e2e-faults.yaml

export DOCKER_HOST=unix://$SOCK
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0 BASE_IMAGE
export COMPOSE_HTTP_TIMEOUT=300
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}   # this tree's code, whatever venv runs it

log() { printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
# shellcheck source=docker/engine.sh
. "$ROOT/docker/engine.sh"   # start_dockerd, stop_dockerd
timing() {  # timing NAME START: record the seconds since START
  local s; s=$(awk -v a="$2" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}')
  printf '%-28s %8s s\n' "$1" "$s" | tee -a "$TIMINGS"
}

[ "$(id -u)" = 0 ] || die "needs root (private dockerd, apt-get, debootstrap)"
[ -x "$PY" ] || die "$PY missing: run 'make setup' first"
mkdir -p "$DOCKER_DIR"
: > "$TIMINGS"
T_ALL=$(now)

# --- 1. packages ---------------------------------------------------------------------
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  t=$(now)
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d 101: the packages must not start the system's dockerd/containerd.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt_log=$DOCKER_DIR/apt.log
  { apt-get install -y -q --no-install-recommends "${need[@]}" \
    || { apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}"; }
  } > "$apt_log" 2>&1 || { tail -20 "$apt_log"; die "apt-get install failed (log: $apt_log)"; }
  if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  timing "apt-get install" "$t"
fi
log "docker-compose (v1) $(docker-compose version --short 2>/dev/null || echo '?')"

# --- 2. private dockerd, always stopped on exit -----------------------------------------
CHILD=""   # the long step running now (see run_bg)
run_bg() {  # run_bg CMD...: run CMD in the background and wait, so INT/TERM act at once
  "$@" &
  CHILD=$!
  local rc=0
  wait "$CHILD" || rc=$?
  CHILD=""
  return "$rc"
}
COMPOSE_PROJECTS=()   # "tool|project|dir" entries to bring down
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  exec 1>&3 2>&4   # the script's own stdout/stderr, even if a step's redirection was active
  if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
    log "interrupted: stopping pid $CHILD"; kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null
  fi
  if [ -S "$SOCK" ] && docker info >/dev/null 2>&1; then
    for entry in "${COMPOSE_PROJECTS[@]}"; do
      IFS='|' read -r tool project dir <<<"$entry"
      log "$tool down ($project)"
      # shellcheck disable=SC2086
      $tool -p "$project" --project-directory "$dir" -f "$ROOT/docker-compose.yml" \
        down --remove-orphans -t 10 >/dev/null 2>&1
    done
    left=$(docker ps -q)
    [ -n "$left" ] && { log "removing leftover containers"; docker rm -f $left >/dev/null; }
  fi
  stop_dockerd
  if [ "${KEEP_DOCKER_DATA:-1}" = 0 ]; then
    log "removing $DOCKER_DIR/data"; rm -rf "$DOCKER_DIR/data"
  fi
  timing "total (e2e.sh)" "$T_ALL" >/dev/null
  if [ "$rc" = 0 ]; then log "PASS"; else log "FAILED (exit $rc)"; fi
  exit "$rc"
}
exec 3>&1 4>&2
trap teardown EXIT
trap 'exit 130' INT TERM

stop_dockerd   # a dockerd left by an interrupted earlier run of this script
t=$(now)
start_dockerd
timing "dockerd ready" "$t"

# --- 3. base image (debootstrap; cached in the data root) -------------------------------
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  log "base image $BASE_IMAGE exists: reused"
else
  log "debootstrap $SUITE (minbase + python3, python3-venv) -> $BASE_IMAGE"
  t=$(now)
  rootfs=$DOCKER_DIR/rootfs
  rm -rf "$rootfs"
  run_bg nice -n 10 debootstrap --variant=minbase --include=python3,python3-venv \
    "$SUITE" "$rootfs" "$MIRROR" > "$DOCKER_DIR/debootstrap.log" 2>&1 \
    || { tail -20 "$DOCKER_DIR/debootstrap.log"; die "debootstrap failed"; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  timing "base image (debootstrap)" "$t"
fi
docker run --rm --network host "$BASE_IMAGE" python3 -c 'import ensurepip, sys; print("base python", sys.version.split()[0])'

# --- 4. wheelhouse (host) and image ----------------------------------------------------
mkdir -p wheelhouse "$DOCKER_DIR/e2e"
req=$DOCKER_DIR/requirements.txt
{ "$PY" docker/requirements.py pyproject.toml all; echo "setuptools>=68"; } > "$req"
if cmp -s "$req" wheelhouse/.requirements.txt && ls wheelhouse/torch-*.whl >/dev/null 2>&1; then
  log "wheelhouse/ up to date ($(ls wheelhouse/*.whl | wc -l) wheels): reused"
else
  log "pip wheel -> wheelhouse/ (torch from the local CPU wheel, the rest from PyPI)"
  t=$(now)
  rm -f wheelhouse/*.whl wheelhouse/.requirements.txt
  run_bg nice -n 10 "$VENV/bin/pip" wheel --wheel-dir wheelhouse -r "$req" \
    > "$DOCKER_DIR/wheelhouse.log" 2>&1 \
    || { tail -20 "$DOCKER_DIR/wheelhouse.log"; die "pip wheel failed (log: $DOCKER_DIR/wheelhouse.log)"; }
  cp "$req" wheelhouse/.requirements.txt
  timing "wheelhouse (pip wheel)" "$t"
fi
log "wheelhouse: $(ls wheelhouse/*.whl | wc -l) wheels, $(du -sh wheelhouse | cut -f1)"

log "docker-compose build testbed (BASE_IMAGE=$BASE_IMAGE, classic builder, network host)"
t=$(now)
old_id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
run_bg nice -n 10 docker-compose --ansi never -f docker-compose.yml build testbed > "$DOCKER_DIR/build.log" 2>&1 \
  || { tail -30 "$DOCKER_DIR/build.log"; die "image build failed (log: $DOCKER_DIR/build.log)"; }
timing "image build" "$t"
new_id=$(docker image inspect -f '{{.Id}}' "$IMAGE")
# the image this build replaced (its venv stage stays: it is the build cache)
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then docker rmi "$old_id" >/dev/null 2>&1 || true; fi
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
log "image $IMAGE: $((size / 1000000)) MB"
echo "image size (MB)              $((size / 1000000))" >> "$TIMINGS"

# --- 5. the docker backend's tests on this engine ----------------------------------------
if [ "${SKIP_DOCKER_TESTS:-0}" = 1 ]; then
  log "SKIP_DOCKER_TESTS=1: tests/docker not run"
else
PARITY_ONCE=""   # the swarm step runs the parity spec on local, docker and swarm at once
[ "${RUN_SWARM:-1}" = 1 ] && PARITY_ONCE="--deselect tests/docker/test_docker_parity.py::test_local_and_docker_agree"
[ "$DOCKER_SUITE" = ci ] && PARITY_ONCE="-m ci"   # CI's bounded suite (tests/conftest.py CI)
log "pytest tests/docker (TESTBED_DOCKER_TESTS=1, DOCKER_SUITE=$DOCKER_SUITE) $PARITY_ONCE"
t=$(now)
# shellcheck disable=SC2086
run_bg env TESTBED_DOCKER_TESTS=1 timeout "$RUN_TIMEOUT_S" "$PY" -m pytest -q -rfE -p no:cacheprovider --durations=10 \
  ${PYTEST_ARGS:-tests/docker $PARITY_ONCE} > "$DOCKER_DIR/pytest-docker.log" 2>&1 \
  || { tail -40 "$DOCKER_DIR/pytest-docker.log"; die "tests/docker failed (log: $DOCKER_DIR/pytest-docker.log)"; }
sed -n '/slowest 10 durations/,$p' "$DOCKER_DIR/pytest-docker.log"   # (CI's budget)
timing "pytest tests/docker" "$t"
fi

# --- 6. compose: the testbed service runs a non-quickstart spec with --backend docker ----
check_record() {  # check_record RUNS_DIR SPEC
  "$PY" - "$1" "$2" <<'EOF'
import json, sqlite3, sys
from pathlib import Path

from testbed.planner import make_plan
from testbed.spec.loader import load_spec

runs, spec = Path(sys.argv[1]), load_spec(Path(sys.argv[2]))
plan = make_plan(spec)
clients, rounds = sorted(plan.client_names()), spec.workload.fl.rounds
db = runs / "testbed.db"
assert db.is_file(), f"no run store at {db}"
con = sqlite3.connect(db)
rows = con.execute("SELECT run_id, status, backend, summary FROM runs").fetchall()
assert len(rows) == 1, f"expected exactly one run in a fresh store, found {len(rows)}"
run_id, status, backend, summary = rows[0]
assert status == "completed", f"run {run_id} has status {status!r}"
assert backend == "docker", f"run {run_id} has backend {backend!r}"
st = {(r, n): s for r, n, s in con.execute(
    "SELECT round, node, status FROM round_status WHERE run_id=?", (run_id,))}
missing = [(r, n) for r in range(1, rounds + 1) for n in clients if (r, n) not in st]
assert not missing, f"no status for (round, node): {missing}"
crashed = [f.node for f in spec.faults if f.kind == "crash"]
for n in crashed:  # the crashed node's container was killed: it misses the later rounds
    assert st[(rounds, n)] in ("excluded", "failed"), (n, st[(rounds, n)])
kinds = {k for (k,) in con.execute("SELECT kind FROM events WHERE run_id=?", (run_id,))}
assert {"node_limits", "node_down", "link_changed"} <= kinds, sorted(kinds)
peak = dict(con.execute(
    "SELECT node, value FROM metrics WHERE run_id=? AND name='peak_rss_mb'", (run_id,)))
assert all(peak.get(n, 0) > 50 for n in clients), f"docker stats memory: {peak}"
art = runs / run_id
for f in ("spec.resolved.yaml", "meta.json"):
    assert (art / f).is_file(), f"artifact {art / f} missing"
s = json.loads(summary or "{}")
print(f"run {run_id}: status={status} backend={backend} statuses={len(st)} "
      f"peak MB={ {n: round(v) for n, v in sorted(peak.items())} } wall_s={s.get('wall_s', '?')}")
EOF
}

compose_up() {  # compose_up TOOL DIR PROJECT EXPERIMENT: `up testbed` from DIR
  # shellcheck disable=SC2086
  (cd "$2" && PWD="$2" EXPERIMENT="$4" DOCKER_SOCK="$SOCK" timeout "$RUN_TIMEOUT_S" \
    $1 --ansi never -p "$3" -f "$ROOT/docker-compose.yml" \
    up --no-build --exit-code-from testbed testbed)
}

run_fleet() {  # run_fleet TOOL NAME: `up testbed` in a fresh project dir, check the record
  local tool=$1 name=$2 dir=$DOCKER_DIR/e2e/$2 project=continuum-e2e-$2
  rm -rf "$dir"; mkdir -p "$dir/runs"
  cp "$COMPOSE_SPEC" "$dir/e2e-faults.yaml"
  COMPOSE_PROJECTS+=("$tool|$project|$dir")
  log "$tool up testbed (EXPERIMENT=e2e-faults.yaml, project $project, runs in ${dir#"$ROOT"/}/runs)"
  local t; t=$(now)
  if ! run_bg compose_up "$tool" "$dir" "$project" e2e-faults.yaml > "$dir/compose.log" 2>&1; then
    tail -40 "$dir/compose.log"
    die "$tool up testbed failed or timed out (log: $dir/compose.log)"
  fi
  timing "compose run ($name)" "$t"
  grep -E '^testbed[-_]1 +\|' "$dir/compose.log" | tail -4 || true
  grep -q "$dir/runs" "$dir/compose.log" || die "the run's summary does not print host paths"
  # shellcheck disable=SC2086
  $tool -p "$project" --project-directory "$dir" -f "$ROOT/docker-compose.yml" \
    down --remove-orphans -t 10 >/dev/null 2>&1 || true
  check_record "$dir/runs" "$COMPOSE_SPEC" || die "run record check failed ($name)"
  left=$(docker ps -aq --filter label=testbed.run)
  [ -z "$left" ] || die "containers left after the compose run: $left"
  # a run that fails is the compose command's failure
  local rc=0
  compose_up "$tool" "$dir" "$project" no-such-spec.yaml > "$dir/compose-fail.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || die "$tool up --exit-code-from testbed exited 0 for a failing run"
  log "a failing run (missing spec): $tool exited $rc"
}

# docker-compose.yml is generated: say so when it no longer matches the generator.
if "$VENV/bin/testbed" compose experiments/quickstart.yaml -o "$DOCKER_DIR/compose.rendered.yml" \
    >/dev/null 2>&1 && ! cmp -s docker-compose.yml "$DOCKER_DIR/compose.rendered.yml"; then
  log "WARNING: docker-compose.yml differs from \`testbed compose experiments/quickstart.yaml\`"
  log "         (run \`make compose\`); testing the committed file:"
  diff docker-compose.yml "$DOCKER_DIR/compose.rendered.yml" | head -8 || true
fi
if [ "${SKIP_COMPOSE:-0}" = 1 ]; then
  log "SKIP_COMPOSE=1: compose runs not exercised"
else
run_fleet docker-compose v1
if docker compose version >/dev/null 2>&1; then
  run_fleet "docker compose" v2
else
  log "compose v2 (\`docker compose\` plugin) not installed here: v2 not exercised"
fi
fi

if [ "${RUN_SWARM:-1}" = 1 ]; then
  t=$(now)
  swarm_args="tests/docker/test_swarm.py"
  [ "$DOCKER_SUITE" = ci ] && swarm_args="tests/docker/test_swarm.py -m ci"
  swarm_args=${SWARM_PYTEST_ARGS:-$swarm_args}
  run_bg env DOCKER_DIR="$DOCKER_DIR" VENV="$VENV" RUN_TIMEOUT_S="$RUN_TIMEOUT_S" \
    SWARM_PYTEST_ARGS="$swarm_args" bash docker/swarm.sh \
    || die "the swarm step failed (docker/swarm.sh)"
  timing "swarm (2 engines)" "$t"
else
  log "RUN_SWARM=0: the swarm step (docker/swarm.sh) not run"
fi

log "timings (this machine: $(nproc) cores):"
cat "$TIMINGS"
