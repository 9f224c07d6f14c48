#!/usr/bin/env bash
# The Debian packages the tests need, installed when missing (as root; a no-op when all
# are present): netem links (ip, tc, iptables, iptables-restore), the dashboard's browser
# tests (chromium). `make test` and `make test-e2e` call it first, so a fresh machine
# has them before the first test that needs them. Not root: prints what is missing (the
# tests that need it then skip, saying why) and goes on.
set -euo pipefail
declare -A pkg=([ip]=iproute2 [tc]=iproute2 [iptables]=iptables [iptables-restore]=iptables
                [chromium]=chromium)
need=()
for bin in ip tc iptables iptables-restore chromium; do
  command -v "$bin" >/dev/null 2>&1 || need+=("${pkg[$bin]}")
done
[ ${#need[@]} -eq 0 ] && exit 0
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
  echo "sysdeps: not root, not installing ${need[*]} (the tests that need them skip)"
  exit 0
fi
echo "sysdeps: apt-get install ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
{ apt-get install -y -q --no-install-recommends "${need[@]}" \
  || { apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}"; }
} >"$log" 2>&1 || { tail -20 "$log"; echo "sysdeps: apt-get install ${need[*]} failed"; exit 1; }
rm -f "$log"
for bin in ip tc iptables iptables-restore chromium; do
  command -v "$bin" >/dev/null 2>&1 || { echo "sysdeps: $bin still missing"; exit 1; }
done
