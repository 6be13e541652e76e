#!/usr/bin/env bash
# The container image really builds and serves. With Debian's daemonless
# podman (as root), from the repository root:
#
#   1. a Debian 12 base image made locally with mmdebstrap from this
#      machine's own apt sources (no registry is reachable), tagged as the
#      names deploy/Dockerfile's FROM lines use; reused once made;
#   2. the unchanged deploy/Dockerfile built as the CPU variant
#      (RINGMOE_CUDA=0, RUNTIME_BASE=debian:12-slim); podman's layer cache
#      and the Dockerfile's cache mount for Bazel make rebuilds incremental;
#   3. the image inspected: non-root user, health check, SIGTERM, size, and
#      no library "not found" by the loader;
#   4. the image run with the demo model read-only at /models, under the
#      Kubernetes Deployment's security context (read-only root, no
#      capabilities, no privilege escalation), and checked from outside:
#      the image's health check, tests/deploy/container_check.py (a streamed
#      generation and KServe through the Python client, /metrics through a
#      real Prometheus, memory against the Deployment's request, SIGTERM
#      draining running streams), exit status 0.
#
# tools/test.sh runs this after the Bazel tests (RINGMOE_SKIP_CONTAINER_TEST=1
# skips it there). Needs root and the packages tools/setup.sh installs.
# Every step has a deadline; containers are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

image=${RINGMOE_CONTAINER_IMAGE:-localhost/ringmoe:cpu}
# Above the server's drain (RINGMOE_SHUTDOWN_GRACE_PERIOD_S below), as in
# the Deployment (terminationGracePeriodSeconds) and the Compose file.
grace_s=45
drain_s=30
start=$(date +%s)

step() { echo "== test_container ($(($(date +%s) - start)) s): $*"; }

for tool in podman runc mmdebstrap prometheus; do
  if ! command -v "$tool" >/dev/null; then
    echo "test_container: $tool missing (run tools/setup.sh)" >&2
    exit 1
  fi
done
if [[ $(id -u) -ne 0 ]]; then
  echo "test_container: needs root (podman without user namespaces)" >&2
  exit 1
fi

# podman's settings for machines like CI's (no systemd, a container
# runtime without crun, no raising of ulimits), in a file of our own that
# CONTAINERS_CONF names for this script's podman commands only: the
# machine's /etc/containers/containers.conf, if any, stays as it is.
state=${XDG_CACHE_HOME:-$HOME/.cache}/ringmoe/container
mkdir -p "$state"
cat >"$state/containers.conf.new" <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
EOF
mv "$state/containers.conf.new" "$state/containers.conf"
export CONTAINERS_CONF=$state/containers.conf

work=$(mktemp -d /tmp/ringmoe-container.XXXXXX)
container=ringmoe-test-$$
cleanup() {
  podman rm --force --time 0 "$container" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# Parallel runs on one machine share podman's storage: one at a time makes
# the base, builds and prunes (a prune may remove layers that another build
# is about to use); running the containers needs no lock.
exec 9>"$state/build.lock"
flock --timeout 3600 9

# ------------------------------------------------------------ 1. base ---
# The host's apt sources: mmdebstrap takes them for the base, and the build
# borrows them (with apt's settings: proxies, mirrors) read-only through
# `podman build -v`, so the Dockerfile's apt-get reaches the same mirror.
apt_sources=()
apt_volumes=()
for path in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
  /etc/apt/sources.list.d/*.sources; do
  if [[ -s $path ]]; then apt_sources+=("$path"); fi
done
for path in /etc/apt/sources.list /etc/apt/sources.list.d /etc/apt/apt.conf.d \
  /etc/apt/trusted.gpg.d /etc/apt/auth.conf.d; do
  if [[ -e $path ]]; then apt_volumes+=(-v "$path:$path:ro"); fi
done

bases=(docker.io/library/debian:12 docker.io/library/debian:12-slim)
if podman image exists "${bases[0]}" && podman image exists "${bases[1]}"; then
  step "base images ${bases[*]} exist: reused"
else
  step "making the Debian 12 base with mmdebstrap from ${apt_sources[*]}"
  # One plain minbase tarball serves both tags. Docker Hub's slim image is
  # minbase less documentation and manual pages, but leaving those out here
  # would break the build stage: OpenJDK's postinst (Bazel's JDK) fails
  # without /usr/share/man/man1.
  timeout 900 mmdebstrap --variant=minbase --quiet \
    bookworm "$work/base.tar" "${apt_sources[@]}"
  timeout 300 podman import --quiet --change 'CMD ["bash"]' "$work/base.tar" \
    "${bases[0]}" >/dev/null
  podman tag "${bases[0]}" "${bases[1]}"
  rm "$work/base.tar"
fi

# ----------------------------------------------------------- 2. build ---
step "building $image from deploy/Dockerfile (CPU variant)"
build_start=$(date +%s)
# --format docker: the OCI format drops SHELL and HEALTHCHECK, both of
# which the Dockerfile relies on. --pull=never: the bases are local.
timeout 3600 podman build --format docker --network=host --pull=never \
  --file deploy/Dockerfile \
  --build-arg RINGMOE_CUDA=0 --build-arg RUNTIME_BASE=debian:12-slim \
  "${apt_volumes[@]}" --tag "$image" . >"$work/build.log" 2>&1 || {
  tail -n 60 "$work/build.log" >&2
  echo "test_container: podman build failed" >&2
  exit 1
}
build_s=$(($(date +%s) - build_start))
# The layer cache stays bounded: the build stage's image (the last "--> ID"
# before the runtime stage's first step) gets a tag, so that pruning
# untagged images removes earlier runs' layers but keeps the package
# installs that the next build reuses.
build_stage=$(awk '/^\[2\/2\] STEP 1\//{print id; exit} /^--> /{id=$NF}' "$work/build.log")
podman tag "$build_stage" "$image-build"
podman image prune --force >/dev/null
flock --unlock 9

# ----------------------------------------------------------- 3. image ---
inspect() { podman image inspect --format "$1" "$image"; }
size=$(inspect '{{.Size}}')
step "image $image built in $build_s s: $((size / 1000000)) MB"
user=$(inspect '{{.Config.User}}')
health=$(inspect '{{.HealthCheck.Test}}')
stop_signal=$(inspect '{{.Config.StopSignal}}')
if [[ $user != 10001:10001 || $health != *healthcheck.sh* || $stop_signal != SIGTERM ]]; then
  echo "test_container: image config: user '$user', health check '$health'," \
    "stop signal '$stop_signal'" >&2
  exit 1
fi
# The Dockerfile runs the same check at build time; this repeats it on the
# finished image, including the bundled libraries' own dependencies.
timeout 120 podman run --rm --network=none --no-healthcheck \
  --entrypoint /bin/bash "$image" -c \
  'LD_LIBRARY_PATH=/opt/ringmoe/lib ldd /opt/ringmoe/bin/ringmoe_server \
     /opt/ringmoe/bin/ringmoe /opt/ringmoe/lib/*' >"$work/ldd.txt"
if grep "not found" "$work/ldd.txt" >&2; then
  echo "test_container: libraries missing in the image" >&2
  exit 1
fi
step "user $user, health check $health, stop signal $stop_signal, no library missing"

# ------------------------------------------------------------- 4. run ---
# Host networking, which needs no bridge set up on the machine: free ports,
# so that parallel runs do not collide.
read -r grpc_port metrics_port http_port < <(/usr/bin/python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
step "running $container: gRPC $grpc_port, metrics $metrics_port, HTTP $http_port"
timeout 120 podman run --detach --name "$container" --network=host \
  --read-only --tmpfs /tmp --cap-drop=ALL --security-opt=no-new-privileges \
  --volume "$PWD/tests/testdata/moe-adder:/models:ro" \
  --env RINGMOE_MODEL_NAME=moe-adder --env RINGMOE_DEVICE=cpu --env RINGMOE_THREADS=2 \
  --env RINGMOE_GRPC_PORT="$grpc_port" --env RINGMOE_METRICS_PORT="$metrics_port" \
  --env RINGMOE_HTTP_PORT="$http_port" --env RINGMOE_SHUTDOWN_GRACE_PERIOD_S="$drain_s" \
  "$image" >/dev/null 2>"$work/run.log" || {
  cat "$work/run.log" >&2
  exit 1
}

# The image's own HEALTHCHECK (healthcheck.sh), as Docker would run it,
# until the server has loaded the model. (podman schedules health checks
# through systemd timers; without systemd it says so in run.log, and
# `podman healthcheck run` still runs them on demand.)
deadline=$(($(date +%s) + 120))
until timeout 30 podman healthcheck run "$container" >/dev/null 2>&1; do
  if [[ $(podman inspect --format '{{.State.Running}}' "$container") != true ||
    $(date +%s) -ge $deadline ]]; then
    podman logs "$container" >&2 || true
    echo "test_container: the container never became healthy" >&2
    exit 1
  fi
  sleep 1
done
verdict=$(timeout 30 podman exec "$container" /opt/ringmoe/bin/healthcheck.sh)
step "podman healthcheck run: healthy; healthcheck.sh says $verdict"
[[ $verdict == SERVING ]]

# The Python client's stubs, generated as //clients/python:stubs does, so
# that this needs no Bazel build on the host.
/usr/bin/python3 -m grpc_tools.protoc -Iringmoe_client/_pb=proto \
  --python_out="$work" --grpc_python_out="$work" \
  proto/generation.proto proto/grpc_service.proto proto/health.proto
server_pid=$(podman inspect --format '{{.State.Pid}}' "$container")
PYTHONPATH="$PWD/clients/python:$work" timeout 600 /usr/bin/python3 -u \
  tests/deploy/container_check.py "$container" "$grpc_port" "$metrics_port" \
  "$server_pid" "$grace_s"

exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$container")
podman logs "$container" >"$work/server.log" 2>&1
if [[ $exit_code != 0 ]] || ! grep -q "draining" "$work/server.log"; then
  tail -n 30 "$work/server.log" >&2
  echo "test_container: exit status $exit_code after SIGTERM" >&2
  exit 1
fi
step "SIGTERM: $(grep -o 'draining [0-9]* requests' "$work/server.log"), exit status 0"

echo "test_container: PASSED in $(($(date +%s) - start)) s" \
  "(image build $build_s s, $((size / 1000000)) MB)"
