#!/usr/bin/env bash
# End-to-end test of the Docker image and docker-compose.yml on a real Docker engine
# (`make test-docker`; .ci/run calls it when running as root).
#
#  1. installs Debian's docker.io, docker-compose and debootstrap if missing;
#  2. starts a PRIVATE dockerd (own data/exec root, socket and pidfile under $DOCKER_DIR,
#     no bridge, no iptables): the host's Docker, if any, is not touched;
#  3. builds the base image continuum-base:bookworm with debootstrap (cached);
#  4. fills wheelhouse/ on the host (cached), builds the image from it, offline;
#  5. runs `docker-compose up testbed` (the quickstart fleet, network_mode: host) in a
#     fresh runs folder, and `docker compose` (v2) too when the plugin is installed;
#  6. checks the run record in the SQLite store; prints the timings;
#  7. always tears down: compose down, dockerd stopped by its pidfile.
#
# Environment: DOCKER_DIR (default .docker), RUN_TIMEOUT_S (default 900),
# KEEP_DOCKER_DATA=0 to delete the engine's data root (images) at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DOCKER_DIR=${DOCKER_DIR:-$ROOT/.docker}
BASE_IMAGE=continuum-base:bookworm   # built below with debootstrap
IMAGE=continuum-testbed:latest
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-900}
PY=$ROOT/.venv/bin/python
SOCK=$DOCKER_DIR/docker.sock
PIDFILE=$DOCKER_DIR/dockerd.pid
TIMINGS=$DOCKER_DIR/timings.txt
PORTS=(9092 9102 9103 9104 9105)   # docker-compose.yml: SuperLink and the 4 SuperNodes

export DOCKER_HOST=unix://$SOCK
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0 BASE_IMAGE
export COMPOSE_HTTP_TIMEOUT=300

log() { printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
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
stop_dockerd() {
  local pid=""
  [ -f "$PIDFILE" ] && pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    log "stopping dockerd (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      log "dockerd still running after 30 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true
      sleep 1
    fi
  fi
  rm -f "$PIDFILE"
  # its managed containerd normally exits with it; not if dockerd had to be killed
  local cpid=""
  [ -f "$DOCKER_DIR/exec/containerd/containerd.pid" ] \
    && cpid=$(cat "$DOCKER_DIR/exec/containerd/containerd.pid" 2>/dev/null || true)
  if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null \
      && grep -q "$DOCKER_DIR/exec/containerd" "/proc/$cpid/cmdline" 2>/dev/null; then
    log "stopping dockerd's containerd (pid $cpid)"; kill -TERM "$cpid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.5; done
  fi
  # dockerd leaves its network-namespace bind mount (exec-root/netns/default) behind
  local m
  for m in $(awk -v d="$DOCKER_DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}
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
for p in "${PORTS[@]}"; do
  if (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
    die "port $p on 127.0.0.1 is in use (the compose fleet needs ${PORTS[*]})"
  fi
done
echo '{}' > "$DOCKER_DIR/daemon.json"   # not /etc/docker/daemon.json
log "starting a private dockerd (socket $SOCK)"
t=$(now)
nice -n 10 dockerd --config-file "$DOCKER_DIR/daemon.json" \
  --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
  --storage-driver=overlay2 \
  --data-root "$DOCKER_DIR/data" --exec-root "$DOCKER_DIR/exec" \
  --pidfile "$PIDFILE" -H "unix://$SOCK" > "$DOCKER_DIR/dockerd.log" 2>&1 &
for _ in $(seq 1 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
docker info >/dev/null 2>&1 || { tail -20 "$DOCKER_DIR/dockerd.log"; die "dockerd did not start"; }
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
{ "$PY" docker/requirements.py pyproject.toml tt; echo "setuptools>=68"; } > "$req"
if cmp -s "$req" wheelhouse/.requirements.txt && ls wheelhouse/torch-*.whl >/dev/null 2>&1; then
  log "wheelhouse/ up to date ($(ls wheelhouse/*.whl | wc -l) wheels): reused"
else
  log "pip wheel -> wheelhouse/ (torch from the local CPU wheel, the rest from PyPI)"
  t=$(now)
  rm -f wheelhouse/*.whl wheelhouse/.requirements.txt
  run_bg nice -n 10 "$ROOT/.venv/bin/pip" wheel --wheel-dir wheelhouse -r "$req" \
    > "$DOCKER_DIR/wheelhouse.log" 2>&1 \
    || { tail -20 "$DOCKER_DIR/wheelhouse.log"; die "pip wheel failed (log: $DOCKER_DIR/wheelhouse.log)"; }
  cp "$req" wheelhouse/.requirements.txt
  timing "wheelhouse (pip wheel)" "$t"
fi
log "wheelhouse: $(ls wheelhouse/*.whl | wc -l) wheels, $(du -sh wheelhouse | cut -f1)"

log "docker-compose build cloud (BASE_IMAGE=$BASE_IMAGE, classic builder, network host)"
t=$(now)
old_id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
run_bg nice -n 10 docker-compose --ansi never -f docker-compose.yml build cloud > "$DOCKER_DIR/build.log" 2>&1 \
  || { tail -30 "$DOCKER_DIR/build.log"; die "image build failed (log: $DOCKER_DIR/build.log)"; }
timing "image build" "$t"
new_id=$(docker image inspect -f '{{.Id}}' "$IMAGE")
# the image this build replaced (its venv stage stays: it is the build cache)
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then docker rmi "$old_id" >/dev/null 2>&1 || true; fi
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
log "image $IMAGE: $((size / 1000000)) MB"
echo "image size (MB)              $((size / 1000000))" >> "$TIMINGS"

# --- 5./6. run the quickstart fleet and check its record --------------------------------
check_record() {  # check_record RUNS_DIR
  "$PY" - "$1" "$ROOT/docker-compose.yml" <<'EOF'
import json, sqlite3, sys
from pathlib import Path
import yaml

runs, compose = Path(sys.argv[1]), yaml.safe_load(open(sys.argv[2]))
clients = sorted(n for n, s in compose["services"].items() if "supernode" in s.get("command", []))
db = runs / "testbed.db"
assert db.is_file(), f"no run store at {db}"
con = sqlite3.connect(db)
rows = con.execute("SELECT run_id, status, backend, summary FROM runs").fetchall()
assert len(rows) == 1, f"expected exactly one run in a fresh store, found {len(rows)}"
run_id, status, backend, summary = rows[0]
assert status == "completed", f"run {run_id} has status {status!r}"
assert backend == "compose", f"run {run_id} has backend {backend!r}"
acc = con.execute("SELECT value FROM metrics WHERE run_id=? AND name='global_acc' AND round=5",
                  (run_id,)).fetchone()
assert acc is not None, "no global_acc for round 5"
got = set(con.execute("SELECT round, node FROM metrics WHERE run_id=? AND name='train_loss'",
                      (run_id,)).fetchall())
missing = [(r, n) for r in range(1, 6) for n in clients if (r, n) not in got]
assert not missing, f"train_loss missing for (round, node): {missing}"
art = runs / run_id
for f in ("spec.resolved.yaml", "meta.json"):
    assert (art / f).is_file(), f"artifact {art / f} missing"
s = json.loads(summary or "{}")
print(f"run {run_id}: status={status} backend={backend} global_acc(round 5)={acc[0]:.3f} "
      f"train_loss rows={len(got)} nodes={clients} wall_s={s.get('wall_s', '?')}")
EOF
}

run_fleet() {  # run_fleet TOOL NAME: bring up `testbed` in a fresh project dir, check it
  local tool=$1 name=$2 dir=$DOCKER_DIR/e2e/$2 project=continuum-e2e-$2
  rm -rf "$dir"; mkdir -p "$dir/runs"
  COMPOSE_PROJECTS+=("$tool|$project|$dir")
  log "$tool up testbed (project $project, runs in ${dir#"$ROOT"/}/runs)"
  local t; t=$(now)
  # shellcheck disable=SC2086
  if ! run_bg timeout "$RUN_TIMEOUT_S" $tool --ansi never -p "$project" --project-directory "$dir" \
      -f "$ROOT/docker-compose.yml" up --no-build --exit-code-from testbed testbed \
      > "$dir/compose.log" 2>&1; then
    tail -40 "$dir/compose.log"
    die "$tool up testbed failed or timed out (log: $dir/compose.log)"
  fi
  timing "fleet run ($name)" "$t"
  grep -E '^testbed[-_]1 +\|' "$dir/compose.log" | tail -4 || true
  # shellcheck disable=SC2086
  $tool -p "$project" --project-directory "$dir" -f "$ROOT/docker-compose.yml" \
    down --remove-orphans -t 10 >/dev/null 2>&1 || true
  check_record "$dir/runs" || die "run record check failed ($name)"
}

# docker-compose.yml is generated: say so when it no longer matches the generator.
if "$ROOT/.venv/bin/testbed" compose experiments/quickstart.yaml -o "$DOCKER_DIR/compose.rendered.yml" \
    >/dev/null 2>&1 && ! cmp -s docker-compose.yml "$DOCKER_DIR/compose.rendered.yml"; then
  log "WARNING: docker-compose.yml differs from \`testbed compose experiments/quickstart.yaml\`"
  log "         (run \`make compose\`); testing the committed file:"
  diff docker-compose.yml "$DOCKER_DIR/compose.rendered.yml" | head -8 || true
fi
run_fleet docker-compose v1
if docker compose version >/dev/null 2>&1; then
  run_fleet "docker compose" v2
else
  log "compose v2 (\`docker compose\` plugin) not installed here: v2 not exercised"
fi

log "timings (this machine: $(nproc) cores):"
cat "$TIMINGS"
