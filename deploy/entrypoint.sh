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
#   RINGMOE_RANKS         N > 1: an expert-parallel job of N ranks (below)
#
# Expert parallelism (RINGMOE_RANKS=N, docs/OPERATIONS.md): this script
# starts `mpirun -np N` with itself as every rank; each rank (it sees
# OMPI_COMM_WORLD_SIZE) execs ringmoe_server with the same flags plus
# --expert_parallel. Rank 0 serves the ports, the health check and /metrics.
# mpirun forwards a SIGTERM by killing the ranks after a short grace, with
# no drain, so this script stays in front as PID 1 instead: it sends SIGTERM
# to rank 0 (pid in a file that rank 0 writes), which drains, stops the
# other ranks and exits 0, and mpirun with it. Without a hostfile the ranks
# run in this container (shared memory, loopback); with one (the MPI
# Operator's OMPI_MCA_orte_default_hostfile) Open MPI reaches the other
# hosts over SSH. RINGMOE_DEVICE=cuda:local gives each rank the GPU of its
# local rank number. OMPI_MCA_* variables set by the caller win over the
# defaults below.
set -euo pipefail

self=$(readlink -f "$0")
home=${RINGMOE_HOME:-/opt/ringmoe}
if [[ -d $home/bin ]]; then
  export PATH="$home/bin:$PATH"
fi

ranks=${RINGMOE_RANKS:-1}
if [[ ! $ranks =~ ^[1-9][0-9]*$ ]]; then
  echo "entrypoint: RINGMOE_RANKS=$ranks is not a positive number" >&2
  exit 2
fi
# A rank of an mpirun job (ours or the caller's): Open MPI sets these.
in_mpi_job=${OMPI_COMM_WORLD_SIZE:+1}

model=${RINGMOE_MODEL:-/models}
# A launcher whose ranks all run on other hosts (a hostfile) needs no
# checkpoint itself; every rank checks its own.
if [[ -n $in_mpi_job || $ranks == 1 || -z ${OMPI_MCA_orte_default_hostfile:-} ]] &&
  [[ ! -f $model/config.json ]]; then
  echo "entrypoint: no checkpoint at RINGMOE_MODEL=$model (config.json missing);" \
    "mount a Hugging Face checkpoint directory there" >&2
  exit 2
fi

# ------------------------------------------------ the expert-parallel job --
# SIGTERM/SIGINT to the launcher (below) go to rank 0 when it runs here.
mpirun_pid=
forward() {
  local pid=
  if [[ -s $RINGMOE_RANK0_PID_FILE ]]; then read -r pid <"$RINGMOE_RANK0_PID_FILE"; fi
  if [[ -n $pid ]] && kill -"$1" "$pid" 2>/dev/null; then
    echo "entrypoint: SIG$1 to rank 0 (pid $pid): it drains, then stops the" \
      "other ranks" >&2
  else
    # Rank 0 not started yet, or on another host: Open MPI kills the job.
    echo "entrypoint: SIG$1 to mpirun: it kills the ranks" >&2
    kill -"$1" "$mpirun_pid" 2>/dev/null || true
  fi
}
if [[ -z $in_mpi_job && $ranks -gt 1 ]]; then
  command -v mpirun >/dev/null || {
    echo "entrypoint: RINGMOE_RANKS=$ranks needs Open MPI's mpirun" >&2
    exit 2
  }
  # --bind-to none: the server sizes its own thread pool (--threads), and
  # Open MPI's default binding of each rank to one core would squeeze it.
  mpi=(-np "$ranks" --bind-to none)
  # The image's user is not root, but `docker run --user 0` is allowed:
  # mpirun refuses root unless told twice.
  if [[ $(id -u) == 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  # The shared-memory transport's single-copy mode (CMA) needs ptrace
  # rights between ranks that a container without capabilities lacks.
  export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
  if [[ -z ${OMPI_MCA_orte_default_hostfile:-} ]]; then
    # Every rank in this container: no remote launcher (the image may have
    # no ssh daemon to reach, and plm's rsh component needs ssh even
    # locally), shared memory between ranks, loopback for the rest, and
    # ranks may outnumber the cores the container is given.
    export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}
    export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
    export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
    export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-lo}
    export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo}
    mpi+=(--oversubscribe)
  fi
  # Rank 0 writes its pid here (below) for the SIGTERM forwarding.
  export RINGMOE_RANK0_PID_FILE=${TMPDIR:-/tmp}/ringmoe-rank0.$$.pid
  rm -f "$RINGMOE_RANK0_PID_FILE"
  # Ranks on other hosts start in an SSH session's environment, not this
  # one: pass the settings on explicitly.
  while IFS='=' read -r name _; do
    mpi+=(-x "$name")
  done < <(env | grep -E '^RINGMOE_[A-Z0-9_]*=' || true)

  trap 'forward TERM' TERM
  trap 'forward INT' INT
  echo "entrypoint: mpirun ${mpi[*]} $self $*" >&2
  mpirun "${mpi[@]}" "$self" "$@" &
  mpirun_pid=$!
  # wait returns early (status > 128) when a trapped signal arrives: wait
  # again until mpirun itself has exited, and exit with its status.
  while true; do
    status=0
    wait "$mpirun_pid" || status=$?
    if ! kill -0 "$mpirun_pid" 2>/dev/null; then break; fi
  done
  rm -f "$RINGMOE_RANK0_PID_FILE"
  echo "entrypoint: mpirun exited with status $status" >&2
  exit "$status"
fi

# ------------------------------------------- one server, or one rank of N --
# The image bundles Debian's gRPC, protobuf, Abseil and prometheus-cpp
# libraries (the runtime base is another distribution): point the loader at
# them for the server only, not for every process in the container (mpirun
# must load its own distribution's libraries).
if [[ -d $home/lib ]]; then
  export LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

device=${RINGMOE_DEVICE:-}
if [[ $device == cuda:local ]]; then
  device=cuda:${OMPI_COMM_WORLD_LOCAL_RANK:-0}
fi

args=(
  --model "$model"
  --host "${RINGMOE_HOST:-0.0.0.0}"
  --grpc_port "${RINGMOE_GRPC_PORT:-8001}"
  --metrics_port "${RINGMOE_METRICS_PORT:-8002}"
  --http_port "${RINGMOE_HTTP_PORT:-8000}"
)
if [[ -n $device ]]; then args+=("--device=$device"); fi
# Optional settings become flags only when set, so the server's own
# defaults stay the single source of truth.
optional=(
  RINGMOE_MODEL_NAME:model_name
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

if [[ -n $in_mpi_job ]]; then
  args+=(--expert_parallel)
  rank=${OMPI_COMM_WORLD_RANK:-0}
  # exec keeps this pid: the launcher above signals the server through it.
  if [[ $rank == 0 && -n ${RINGMOE_RANK0_PID_FILE:-} ]]; then
    echo $$ >"$RINGMOE_RANK0_PID_FILE"
  fi
  # Rank 0 alone logs (the server's rule): one command line is enough.
  if [[ $rank == 0 ]]; then
    echo "entrypoint: rank 0 of $OMPI_COMM_WORLD_SIZE: ringmoe_server ${args[*]} $*" >&2
  fi
else
  echo "entrypoint: ringmoe_server ${args[*]} $*" >&2
fi
exec ringmoe_server "${args[@]}" "$@"
