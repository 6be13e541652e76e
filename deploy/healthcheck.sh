#!/usr/bin/env bash
# The image's HEALTHCHECK: one grpc.health.v1 Check against the local gRPC
# port through `ringmoe health` (exit 0 only while SERVING; NOT_SERVING
# during a drain makes the container unhealthy, which is what a load
# balancer needs to stop sending traffic). Kubernetes uses its native grpc
# probe instead and does not run this.
#
#   RINGMOE_GRPC_PORT       the port the entrypoint gave the server (8001)
#   RINGMOE_HEALTH_SERVICE  service to check (default "": the whole server)
#   RINGMOE_HEALTH_TIMEOUT_S  default 3, below Docker's --timeout
set -euo pipefail

home=${RINGMOE_HOME:-/opt/ringmoe}
if [[ -d $home/lib ]]; then
  export LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [[ -d $home/bin ]]; then
  export PATH="$home/bin:$PATH"
fi

exec ringmoe health --server "127.0.0.1:${RINGMOE_GRPC_PORT:-8001}" \
  --service "${RINGMOE_HEALTH_SERVICE:-}" \
  --timeout_s "${RINGMOE_HEALTH_TIMEOUT_S:-3}"
