#!/usr/bin/env bash
# Runs PROGRAM as every rank of an NP-process MPI job on this machine, ranks
# possibly outnumbering cores, and exits with mpirun's status; a job still
# running after MPI_JOB_SECONDS (default 50) is killed (status 124).
#
# Usage: mpirun_test.sh NP PROGRAM [ARG...]
set -uo pipefail

np=$1
program=$2
shift 2

# Open MPI keeps Unix sockets in its session directory under TMPDIR, and a
# socket's path may not exceed 108 bytes: Bazel's test directory is deeper.
session_dir=$(mktemp -d /tmp/ringmoe_mpi.XXXXXX)
trap 'rm -rf "$session_dir"' EXIT
export TMPDIR=$session_dir

# One machine: no remote launcher, the ob1 messaging layer over shared
# memory (vader) and loopback TCP, and no probing of InfiniBand or UCX.
export OMPI_MCA_plm=isolated
export OMPI_MCA_pml=ob1
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_oob_tcp_if_include=lo
# Every rank's help message printed as is: aggregating them after MPI_Abort
# logs a spurious ORTE_ERROR_LOG in Open MPI 4.1.
export OMPI_MCA_orte_base_help_aggregate=0

# Under --config=asan: Open MPI's own allocations that outlive
# MPI_Finalize are not reported (slow unwinding so that their stacks reach
# its libraries through its components, which have no frame pointers).
if [[ -n ${ASAN_OPTIONS:-} ]]; then
  export ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0
  # Beside this script's source: tests of other packages run it under
  # their own names.
  here=$(dirname "$(readlink -f "$0")")
  export LSAN_OPTIONS=suppressions=$here/open_mpi.lsan.supp:print_suppressions=0
fi

# Bazel's result files belong to this script, not to each rank.
unset XML_OUTPUT_FILE TEST_PREMATURE_EXIT_FILE TEST_SHARD_STATUS_FILE

timeout -k 5 "${MPI_JOB_SECONDS:-50}" \
  mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
  "$program" "$@"
