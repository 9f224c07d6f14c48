# The private dockerd of docker/e2e.sh and docker/with-engine.sh (sourced, not run).
# Needs DOCKER_DIR, SOCK, PIDFILE and the functions log and die.

# dockerd's exec root (its containerd's sockets, the netns mounts): a short path under /run
# named after DOCKER_DIR, not DOCKER_DIR/exec: a unix socket's path may not exceed 107
# bytes, and a clone at /tmp/ci-rehearsal/<sha>/main made .docker/exec/containerd/
# containerd.sock.ttrpc 109 (containerd never started; 2026-12-06).
exec_root() {
  printf '/run/continuum-docker/%s' "$(printf '%s' "$DOCKER_DIR" | md5sum | cut -c1-12)"
}

start_dockerd() {  # a dockerd of our own: data root, socket, pidfile under DOCKER_DIR
  echo '{}' > "$DOCKER_DIR/daemon.json"   # not /etc/docker/daemon.json
  mkdir -p "$(exec_root)"
  log "starting a private dockerd (socket $SOCK, exec root $(exec_root))"
  nice -n 10 dockerd --config-file "$DOCKER_DIR/daemon.json" \
    --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
    --storage-driver=overlay2 \
    --data-root "$DOCKER_DIR/data" --exec-root "$(exec_root)" \
    --pidfile "$PIDFILE" -H "unix://$SOCK" > "$DOCKER_DIR/dockerd.log" 2>&1 &
  for _ in $(seq 1 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { tail -20 "$DOCKER_DIR/dockerd.log"; die "dockerd did not start"; }
}

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
  local ex; ex=$(exec_root)
  [ -f "$ex/containerd/containerd.pid" ] \
    && cpid=$(cat "$ex/containerd/containerd.pid" 2>/dev/null || true)
  if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null \
      && grep -q "$ex/containerd" "/proc/$cpid/cmdline" 2>/dev/null; then
    log "stopping dockerd's containerd (pid $cpid)"; kill -TERM "$cpid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.5; done
  fi
  # dockerd leaves its network-namespace bind mount (exec-root/netns/default) behind
  local m
  for m in $(awk -v d="$DOCKER_DIR/" -v e="$ex/" 'index($2, d) == 1 || index($2, e) == 1 {print $2}' \
      /proc/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}
