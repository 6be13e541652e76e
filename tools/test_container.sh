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
#      draining running streams), exit status 0;
#   5. the same image as a two-rank expert-parallel job in one container
#      (RINGMOE_RANKS=2: mpirun, shared memory, loopback), same security
#      context: healthy, the same greedy answer over HTTP as the single
#      rank gave, /metrics answering, and `podman stop` (SIGTERM to the
#      entrypoint, which passes it to rank 0) ending every rank with exit
#      status 0 well within the grace period.
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
ep_container=ringmoe-test-ep-$$
cleanup() {
  podman rm --force --time 0 "$container" >/dev/null 2>&1 || true
  podman rm --force --time 0 "$ep_container" >/dev/null 2>&1 || true
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
# A build killed midway leaves its working containers (listed with
# --external, status "Storage"), which hold their images against the
# prune. Under the lock no build runs, so any such container is stale.
podman ps --all --external --format '{{.ID}} {{.Status}}' |
  awk '$2 == "Storage" {print $1}' | xargs --no-run-if-empty podman rm --force >/dev/null
podman image prune --force >/dev/null ||
  echo "test_container: podman image prune failed; the layer cache keeps what it holds" >&2
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
# start NAME ENV...: the image as NAME with the demo model read-only under
# the Deployment's security settings, the ports above and ENV (NAME=VALUE)
# besides.
start() {
  local name=$1 env=() setting
  shift
  for setting in "$@"; do env+=(--env "$setting"); done
  timeout 120 podman run --detach --name "$name" --network=host \
    --read-only --tmpfs /tmp --cap-drop=ALL --security-opt=no-new-privileges \
    --volume "$PWD/tests/testdata/moe-adder:/models:ro" \
    --env RINGMOE_MODEL_NAME=moe-adder --env RINGMOE_DEVICE=cpu \
    --env RINGMOE_GRPC_PORT="$grpc_port" --env RINGMOE_METRICS_PORT="$metrics_port" \
    --env RINGMOE_HTTP_PORT="$http_port" --env RINGMOE_SHUTDOWN_GRACE_PERIOD_S="$drain_s" \
    "${env[@]}" "$image" >/dev/null 2>"$work/run-$name.log" || {
    cat "$work/run-$name.log" >&2
    exit 1
  }
}

# wait_healthy NAME: the image's own HEALTHCHECK (healthcheck.sh), as Docker
# would run it, until the server has loaded the model; then prints what
# healthcheck.sh says. (podman schedules health checks through systemd
# timers; without systemd it says so in the run log, and `podman
# healthcheck run` still runs them on demand.)
wait_healthy() {
  local deadline=$(($(date +%s) + 120))
  until timeout 30 podman healthcheck run "$1" >/dev/null 2>&1; do
    if [[ $(podman inspect --format '{{.State.Running}}' "$1") != true ||
      $(date +%s) -ge $deadline ]]; then
      podman logs "$1" >&2 || true
      echo "test_container: $1 never became healthy" >&2
      exit 1
    fi
    sleep 1
  done
  timeout 30 podman exec "$1" /opt/ringmoe/bin/healthcheck.sh
}

step "running $container: gRPC $grpc_port, metrics $metrics_port, HTTP $http_port"
start "$container" RINGMOE_THREADS=2
verdict=$(wait_healthy "$container")
step "podman healthcheck run: healthy; healthcheck.sh says $verdict"
[[ $verdict == SERVING ]]

# One greedy completion through the OpenAI-compatible HTTP API: the
# reference answer for the expert-parallel run (step 5) must be the same.
complete() {
  timeout 60 /usr/bin/python3 -c '
import json, sys, urllib.request
body = json.dumps({"model": "moe-adder", "prompt": "37+485=", "max_tokens": 8,
                   "temperature": 0}).encode()
req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % sys.argv[1], body,
                             {"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=50))["choices"][0]["text"])' "$1"
}
single_answer=$(complete "$http_port")
step "HTTP completion of 37+485= by one rank: '$single_answer'"

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

# ---------------------------------------------- 5. expert parallelism ---
# Two ranks in one container, as the Compose file's ringmoe-ep service
# runs them; rank 0 takes the same ports as the single-rank run had.
step "running $ep_container: RINGMOE_RANKS=2 on the CPU, same ports"
start "$ep_container" RINGMOE_RANKS=2 RINGMOE_THREADS=1
verdict=$(wait_healthy "$ep_container")
[[ $verdict == SERVING ]]
ranks_running=$(podman top "$ep_container" args | grep -c 'ringmoe_server .*--expert_parallel' || true)
ep_answer=$(complete "$http_port")
step "two ranks ($ranks_running ringmoe_server processes): health $verdict," \
  "answer '$ep_answer'"
if [[ $ranks_running != 2 || $ep_answer != "$single_answer" ]]; then
  podman logs "$ep_container" >&2 || true
  echo "test_container: two ranks: $ranks_running processes, answer '$ep_answer'" \
    "(one rank: '$single_answer')" >&2
  exit 1
fi
# Into a variable first: grep -q ending the pipe early could fail curl
# (SIGPIPE) under pipefail.
ep_metrics=$(timeout 30 curl -fsS "http://127.0.0.1:$metrics_port/metrics")
if [[ $ep_metrics != *ringmoe_generated_tokens_total* ]]; then
  echo "test_container: two ranks: /metrics without ringmoe_generated_tokens_total" >&2
  exit 1
fi
# podman stop: SIGTERM to PID 1 (the entrypoint), SIGKILL after grace_s.
# A clean stop is rank 0 draining, telling rank 1 to stop, mpirun exiting
# 0, all well before the SIGKILL.
stop_start=$(date +%s)
timeout $((grace_s + 30)) podman stop --time "$grace_s" "$ep_container" >/dev/null
stop_s=$(($(date +%s) - stop_start))
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$ep_container")
podman logs "$ep_container" >"$work/server-ep.log" 2>&1
if [[ $exit_code != 0 || $stop_s -ge $grace_s ]] ||
  ! grep -q "SIGTERM to rank 0" "$work/server-ep.log" ||
  ! grep -q "mpirun exited with status 0" "$work/server-ep.log"; then
  tail -n 30 "$work/server-ep.log" >&2
  echo "test_container: two ranks: exit status $exit_code, $stop_s s after SIGTERM" >&2
  exit 1
fi
step "two ranks: /metrics answers; SIGTERM: rank 0 drained, exit status 0 in $stop_s s"

echo "test_container: PASSED in $(($(date +%s) - start)) s" \
  "(image build $build_s s, $((size / 1000000)) MB)"
