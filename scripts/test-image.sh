#!/usr/bin/env bash
# Tests the OCI image that scripts/build-image.sh built (a documented
# command, not part of CI):
#
#   scripts/test-image.sh [LAYOUT:TAG]
#
# default ${CARGO_TARGET_DIR:-target}/image/openshell-oci:<workspace version>.
# Needs root (chroot, namespaces); installs umoci, skopeo, jq, curl and
# iproute2 if missing (image/deps.sh).
#
# 1. `skopeo inspect --config`: user 65532:65532, no entrypoint and no
#    command (the Helm chart gives the command), the version label.
# 2. `umoci unpack`, then in the root filesystem: no setuid or setgid file,
#    /var/lib/openshell owned by 65532:65532, the user in /etc/passwd.
# 3. image/Dockerfile, never built here, stays equivalent: its ARG VERSION
#    is the workspace version, and on a Debian 12 host (skipped elsewhere)
#    its root filesystem stage (image/rootfs-from-apt.sh, with this host's
#    apt) gives the same tree as the image without its binaries (paths,
#    modes, owners, sizes, contents). Runs `apt-get update`. A Debian update
#    published between the build and this test shows as a difference:
#    rebuild. OPENSHELL_IMAGE_TEST_DOCKERFILE=0 skips the tree comparison.
# 4. Each binary's `--version`, run from the unpacked root filesystem as
#    65532:65532 with an empty environment and nothing mounted
#    (`chroot --userspec`): openshell-gateway, openshell-supervisor,
#    openshell-sandbox-runtime and openshell-pool print `<name> <version>`.
# 5. The image runs the system: in fresh network, PID and mount namespaces
#    (/proc and a few /dev nodes mounted into the root filesystem, as a
#    container runtime would; the root filesystem read-only and a volume
#    at /var/lib/openshell, as the chart runs it), as 65532:65532, a
#    one-node insecure gateway writing under /var/lib/openshell turns ready, the image's
#    `openshell-pool raft status` reads it (what the chart's `helm test`
#    runs), a supervisor attaches and is listed by `openshell-pool pool
#    status`; then SIGTERM stops the supervisor and the gateway (exit 0),
#    and the gateway, started again on its data, still knows the member.
# Exits 1 at the first failure, naming it.
set -euo pipefail

fail() {
  echo "scripts/test-image.sh: FAIL: $*" >&2
  exit 1
}

# wait_for WHAT SECONDS COMMAND...: runs COMMAND every 0.5 s until it succeeds.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.5
  done
  echo "ok: $what"
}

# stop_within NAME PID SECONDS: SIGTERM, then waits; fails unless it exits 0.
stop_within() {
  local name=$1 pid=$2 seconds=$3 rc=0
  local comm uid
  # This namespace's /proc is the one mounted in the root filesystem.
  comm=$(cat "$proc/$pid/comm")
  uid=$(awk '/^Uid:/ { print $2 }' "$proc/$pid/status")
  [ "$comm" = "${name:0:15}" ] || fail "pid $pid is '$comm', not $name"
  [ "$uid" = 65532 ] || fail "$comm runs as uid $uid, not 65532"
  kill -TERM "$pid"
  local deadline=$((SECONDS + seconds))
  while kill -0 "$pid" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$name did not stop within ${seconds}s of SIGTERM"
    sleep 0.2
  done
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "$name exited $rc after SIGTERM (see $log_dir/${name#openshell-}.log)"
  echo "ok: $name (uid 65532) stopped on SIGTERM, exit 0"
}

# Step 5, run by the outer script inside `unshare --net --pid --mount`:
# every process it starts dies with the namespace when it returns.
in_namespaces() {
  local rootfs=$1 data=$3
  log_dir=$2
  proc=$rootfs/proc
  ip link set lo up
  # The root filesystem read-only, the data directory a volume (what the
  # chart's readOnlyRootFilesystem and PersistentVolumeClaim give).
  mount --bind "$rootfs" "$rootfs"
  mount -o remount,bind,ro "$rootfs"
  mount --bind "$data" "$rootfs/var/lib/openshell"
  if touch "$rootfs/usr/read-only-check" 2>/dev/null; then
    fail "could not make the root filesystem read-only"
  fi
  mount -t proc proc "$rootfs/proc"
  mount -t tmpfs -o mode=0755,nosuid tmpfs "$rootfs/dev"
  for node in null zero full random urandom tty; do
    touch "$rootfs/dev/$node"
    mount --bind "/dev/$node" "$rootfs/dev/$node"
  done
  local chroot
  chroot=$(command -v chroot)
  # run BINARY ARGS...: as 65532:65532 in the root filesystem.
  run() {
    local bin=$1
    shift
    env -i RUST_LOG=info "$chroot" --userspec=65532:65532 "$rootfs" "/usr/local/bin/$bin" "$@"
  }
  # spawn LOG BINARY ARGS...: in the background, the PID ($!) being the
  # binary's own (env and chroot exec it), so SIGTERM reaches it.
  spawn() {
    local log=$1 bin=$2
    shift 2
    (exec env -i RUST_LOG=info "$chroot" --userspec=65532:65532 "$rootfs" "/usr/local/bin/$bin" "$@" >"$log" 2>&1) &
  }
  local pool=(openshell-pool --insecure --endpoints 127.0.0.1:7000)

  # start_gateway LOG: the one-node gateway, then waits until it is ready.
  start_gateway() {
    spawn "$1" openshell-gateway --insecure --node-id 1 --cluster-id image-test \
      --listen 127.0.0.1:7000 --initial-voters 1=127.0.0.1:7000 \
      --http-listen 127.0.0.1:7080 --data-dir /var/lib/openshell/gateway
    gateway=$!
    wait_for "gateway /readyz 200 (data in /var/lib/openshell/gateway, as 65532)" 60 \
      curl -fsS http://127.0.0.1:7080/readyz ||
      fail "gateway not ready within 60s: $(tail -5 "$1")"
  }
  local gateway
  start_gateway "$log_dir/gateway.log"
  run "${pool[@]}" raft status || fail "openshell-pool raft status"
  [ -d "$data/gateway/raft" ] || fail "the gateway's data is not on the volume"

  spawn "$log_dir/supervisor.log" openshell-supervisor --insecure --credential "" \
    --gateways 127.0.0.1:7000 --pool-member-id image-test-1 --pool-member-uid uid-image-test-1 \
    --pool-advertise-ip 127.0.0.1 --http-listen 127.0.0.1:7180 --capacity 1
  local supervisor=$!
  wait_for "supervisor /readyz 200 (attached to the gateway)" 60 \
    curl -fsS http://127.0.0.1:7180/readyz ||
    fail "supervisor not ready within 60s: $(tail -5 "$log_dir/supervisor.log")"
  local status
  status=$(run "${pool[@]}" pool status) || fail "openshell-pool pool status"
  echo "$status"
  grep -q image-test-1 <<<"$status" || fail "pool status does not list image-test-1"

  stop_within openshell-supervisor "$supervisor" 60
  stop_within openshell-gateway "$gateway" 30

  # A restart (a pod's container restarting on its volume) finds its data.
  start_gateway "$log_dir/gateway-restart.log"
  status=$(run "${pool[@]}" pool status) || fail "openshell-pool pool status after the restart"
  grep -q image-test-1 <<<"$status" || fail "after a restart the gateway lost member image-test-1"
  echo "ok: restarted on its data, member image-test-1 still known"
  stop_within openshell-gateway "$gateway" 30
}

if [ "${1:-}" = "--in-namespaces" ]; then
  in_namespaces "$2" "$3" "$4"
  exit 0
fi

cd "$(dirname "$0")/.."
started=$SECONDS
target=${CARGO_TARGET_DIR:-$PWD/target}
version=$(awk '/^\[workspace.package\]/ { p = 1; next } /^\[/ { p = 0 }
  p && $1 == "version" { gsub(/"/, "", $3); print $3 }' Cargo.toml)
image=${1:-$target/image/openshell-oci:$version}
binaries=(openshell-gateway openshell-supervisor openshell-sandbox-runtime openshell-pool)

[ "$(id -u)" -eq 0 ] || fail "run as root (chroot, namespaces)"
image/deps.sh

tmp=$(mktemp -d /tmp/openshell-image-test.XXXXXX)
cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "scripts/test-image.sh: logs kept in $tmp/logs" >&2
    rm -rf "$tmp/bundle"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
mkdir -p "$tmp/logs"

echo "--- 1. image config (skopeo inspect --config oci:$image)"
config=$(skopeo inspect --config "oci:$image") || fail "skopeo inspect oci:$image"
[ "$(jq -r '.config.User' <<<"$config")" = "65532:65532" ] ||
  fail "config user is '$(jq -r '.config.User' <<<"$config")', not 65532:65532"
[ "$(jq -c '.config.Entrypoint // [] | length' <<<"$config")" = 0 ] || fail "the image has an entrypoint"
[ "$(jq -c '.config.Cmd // [] | length' <<<"$config")" = 0 ] || fail "the image has a command"
label=$(jq -r '.config.Labels["org.opencontainers.image.version"]' <<<"$config")
[ "$label" = "$version" ] || fail "version label '$label', expected $version"
echo "ok: user 65532:65532, no entrypoint or command, version $label"
jq -r '.config.Labels | to_entries[] | "    \(.key)=\(.value)"' <<<"$config"

echo "--- 2. root filesystem (umoci unpack)"
umoci unpack --image "$image" "$tmp/bundle" >/dev/null
rootfs=$tmp/bundle/rootfs
special=$(find "$rootfs" -xdev -perm /6000)
[ -z "$special" ] || fail "setuid/setgid files in the image: $special"
echo "ok: no setuid or setgid file"
owner=$(stat -c %u:%g "$rootfs/var/lib/openshell")
[ "$owner" = "65532:65532" ] || fail "/var/lib/openshell is owned by $owner"
grep -qx 'openshell:x:65532:65532:openshell:/var/lib/openshell:/usr/sbin/nologin' "$rootfs/etc/passwd" ||
  fail "/etc/passwd has no openshell user 65532"
echo "ok: user openshell 65532:65532 owns /var/lib/openshell"
echo "    $(du -sh --apparent-size "$rootfs" | cut -f1) unpacked; Debian packages: $(find "$rootfs/var/lib/dpkg/status.d" -type f -printf '%f\n' | LC_ALL=C sort | paste -sd' ' -)"

echo "--- 3. image/Dockerfile's root filesystem equals the image's"
dockerfile_version=$(awk -F= '/^ARG VERSION=/ { print $2 }' image/Dockerfile)
[ "$dockerfile_version" = "$version" ] ||
  fail "image/Dockerfile has ARG VERSION=$dockerfile_version, the workspace is $version"
# shellcheck source=/dev/null
host_os=$(. /etc/os-release && echo "${ID:-}-${VERSION_ID:-}")
if [ "${OPENSHELL_IMAGE_TEST_DOCKERFILE:-1}" = 0 ]; then
  echo "skipped: OPENSHELL_IMAGE_TEST_DOCKERFILE=0"
elif [ "$host_os" = debian-12 ]; then
  apt-get update -qq -o DPkg::Lock::Timeout=300
  image/rootfs-from-apt.sh "$tmp/dockerfile-rootfs" >/dev/null
  tree() { (cd "$1" && find . ! -path './usr/local/bin/openshell-*' -printf '%p %M %u:%g %s %l\n' | LC_ALL=C sort); }
  diff <(tree "$rootfs") <(tree "$tmp/dockerfile-rootfs") >"$tmp/logs/dockerfile-rootfs.diff" ||
    fail "the Dockerfile's root filesystem differs from the image's: $(head -20 "$tmp/logs/dockerfile-rootfs.diff")"
  diff -r --no-dereference -x 'openshell-*' "$rootfs" "$tmp/dockerfile-rootfs" >"$tmp/logs/dockerfile-rootfs.diff" ||
    fail "the Dockerfile's root filesystem differs from the image's: $(head -20 "$tmp/logs/dockerfile-rootfs.diff")"
  echo "ok: same tree and contents ($(find "$rootfs" | wc -l) paths)"
else
  echo "skipped: the host is $host_os, not debian-12"
fi

echo "--- 4. --version of each binary, as 65532:65532 in the root filesystem"
for bin in "${binaries[@]}"; do
  out=$(env -i "$(command -v chroot)" --userspec=65532:65532 "$rootfs" "/usr/local/bin/$bin" --version 2>&1) ||
    fail "$bin --version: $out"
  [ "$out" = "$bin $version" ] || fail "$bin --version printed '$out', expected '$bin $version'"
  echo "ok: $out"
done

echo "--- 5. gateway, supervisor and CLI from the image (own network, PID and mount namespaces; read-only root, a volume at /var/lib/openshell)"
# The volume: empty, owned by 65532 (as fsGroup or an init step makes it).
install -d -o 65532 -g 65532 -m 0750 "$tmp/data"
unshare --net --pid --mount --fork -- bash "$0" --in-namespaces "$rootfs" "$tmp/logs" "$tmp/data" ||
  fail "running the image (logs in $tmp/logs)"

echo "scripts/test-image.sh: PASS oci:$image in $((SECONDS - started))s"
