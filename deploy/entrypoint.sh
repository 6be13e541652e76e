#!/usr/bin/env bash
# The container's entrypoint: turns RINGMOE_* environment variables into
# ringmoe_server flags and execs the server, so that SIGTERM from Docker or
# Kubernetes reaches it directly (it drains and exits 0) and its exit status
# is the container's. Arguments are appended as further server flags
# (`docker run IMAGE --max_queue 64`).
#
# The same script runs outside a container (tests/deploy/entrypoint_test.py
# does exactly that): ringmoe_server is looked up on PATH, and the bundled
# libraries directory is used only where it exists.
#
#   RINGMOE_MODEL         checkpoint directory (default /models, the volume)
#   RINGMOE_MODEL_NAME    name clients use (default: the directory's name)
#   RINGMOE_DEVICE        cpu | cuda:N (default: the server's, cpu)
#   RINGMOE_THREADS, RINGMOE_WEIGHT_DTYPE, RINGMOE_KV_CACHE_TOKENS
#   RINGMOE_HOST          bind address (default 0.0.0.0: reachable from
#                         outside the container)
#   RINGMOE_GRPC_PORT     default 8001
#   RINGMOE_METRICS_PORT  default 8002
#   RINGMOE_SHUTDOWN_GRACE_PERIOD_S  drain time on SIGTERM (default: server's)
#   RINGMOE_READY_FILE    file written once serving (JSON with both ports)
#   RINGMOE_EXTRA_ARGS    further flags, split on whitespace
#   RINGMOE_HOME          install root with bin/ and lib/ (default /opt/ringmoe)
set -euo pipefail

home=${RINGMOE_HOME:-/opt/ringmoe}
# The image bundles Debian's gRPC, protobuf, Abseil and prometheus-cpp
# libraries (the runtime base is another distribution): point the loader at
# them for the server only, not for every process in the container.
if [[ -d $home/lib ]]; then
  export LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [[ -d $home/bin ]]; then
  export PATH="$home/bin:$PATH"
fi

model=${RINGMOE_MODEL:-/models}
if [[ ! -f $model/config.json ]]; then
  echo "entrypoint: no checkpoint at RINGMOE_MODEL=$model (config.json missing);" \
    "mount a Hugging Face checkpoint directory there" >&2
  exit 2
fi

args=(
  --model "$model"
  --host "${RINGMOE_HOST:-0.0.0.0}"
  --grpc_port "${RINGMOE_GRPC_PORT:-8001}"
  --metrics_port "${RINGMOE_METRICS_PORT:-8002}"
  --http_port "${RINGMOE_HTTP_PORT:-8000}"
)
# Optional settings become flags only when set, so the server's own
# defaults stay the single source of truth.
optional=(
  RINGMOE_MODEL_NAME:model_name
  RINGMOE_DEVICE:device
  RINGMOE_THREADS:threads
  RINGMOE_WEIGHT_DTYPE:weight_dtype
  RINGMOE_KV_CACHE_TOKENS:kv_cache_tokens
  RINGMOE_SHUTDOWN_GRACE_PERIOD_S:shutdown_grace_period_s
  RINGMOE_READY_FILE:ready_file
)
for pair in "${optional[@]}"; do
  var=${pair%%:*}
  flag=${pair#*:}
  if [[ -n ${!var:-} ]]; then args+=("--$flag=${!var}"); fi
done
if [[ -n ${RINGMOE_EXTRA_ARGS:-} ]]; then
  # Word splitting is the point: "--max_queue 64 --max_running_sequences 8".
  read -r -a extra <<<"$RINGMOE_EXTRA_ARGS"
  args+=("${extra[@]}")
fi

echo "entrypoint: ringmoe_server ${args[*]} $*" >&2
exec ringmoe_server "${args[@]}" "$@"
