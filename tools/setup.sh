#!/usr/bin/env bash
# Installs the Debian packages ringmoe's build, tests and demo need.
# Idempotent: installs only what is missing, with a single `apt-get update`.
set -euo pipefail

packages=(
  # Build: Debian's Bazel and the rule sets it needs offline.
  bazel-bootstrap bazel-rules-java bazel-platforms bazel-skylib
  build-essential clang clang-format libclang-rt-14-dev
  # System libraries linked through third_party/.
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev libpcre2-dev libicu-dev pkgconf libcivetweb-dev
  # Tests and clients: Python grpcio, a real Prometheus, Node for @grpc/grpc-js.
  python3 python3-numpy python3-grpcio python3-grpc-tools python3-yaml
  # The chat templates' reference (transformers renders them with jinja2).
  python3-jinja2
  prometheus curl nlohmann-json3-dev
  # tests/isa: every kernel path on emulated CPUs (qemu-x86_64 -cpu MODEL).
  qemu-user
  # tests/deploy: shell lint of the container's entrypoint and health check
  # (promtool comes with prometheus above).
  shellcheck
  # tools/test_container.sh: build and run the image with daemonless podman
  # (runc: Debian's podman recommends crun but does not install it), a
  # Debian base made locally, Compose files parsed, manifests checked
  # against the Kubernetes API's schema (python3-kubernetes' models).
  podman runc mmdebstrap podman-compose python3-kubernetes
)
# Node.js may come from elsewhere (NodeSource ships npm inside nodejs, and
# Debian's npm conflicts with it): take Debian's only when npm is missing.
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The Node client of the integration tests: @grpc/grpc-js and
# @grpc/proto-loader from the npm registry, pinned by the committed lock file.
node_dir=$(cd "$(dirname "$0")/.." && pwd)/tests/integration/node
if [[ ! -d $node_dir/node_modules/@grpc/grpc-js ||
      $node_dir/package-lock.json -nt $node_dir/node_modules ]]; then
  echo "setup: npm ci in tests/integration/node" >&2
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "setup: npm ci failed; the Node client test installs its own copy" >&2
fi
