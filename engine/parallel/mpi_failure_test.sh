#!/usr/bin/env bash
# A job whose rank fails never hangs: mpi_failure_scenarios under mpirun.
#   - A rank that skips a collective: every other rank reports
#     DEADLINE_EXCEEDED (naming the missing rank where the collective can
#     tell) between the 2 s timeout and 2 s later, then the job ends.
#   - A rank killed mid-run: the job ends within 10 s, not after the 30 s
#     timeout, and mpirun names the rank.
#
# Usage: mpi_failure_test.sh MPIRUN_TEST_SH SCENARIOS_PROGRAM
set -uo pipefail

mpirun_test=$1
scenarios=$2
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# at_least X Y: whether the number X >= Y.
at_least() {
  awk -v x="$1" -v y="$2" 'BEGIN { exit !(x + 0 >= y + 0) }'
}

# run NP SCENARIO: sets $output, $status and $seconds.
run() {
  local start end
  start=$(date +%s.%N)
  output=$(MPI_JOB_SECONDS=40 "$mpirun_test" "$1" "$scenarios" "$2" 2>&1)
  status=$?
  end=$(date +%s.%N)
  seconds=$(awk "BEGIN { printf \"%.2f\", $end - $start }")
  echo "=== $2 with $1 ranks: status $status after $seconds s"
  echo "$output"
}

# expect_deadline NP SCENARIO COLLECTIVE [WAITING_FOR]
expect_deadline() {
  run "$1" "$2"
  ((status != 0 && status != 124)) || fail "$2: mpirun status $status"
  local rank line took
  for ((rank = 0; rank < $1; ++rank)); do
    ((rank == 1)) && continue
    line=$(grep "^rank $rank: $3 failed after" <<<"$output")
    if [[ -z $line ]]; then
      fail "$2: rank $rank reported no failure of $3"
      continue
    fi
    [[ $line == *DEADLINE_EXCEEDED* ]] || fail "$2: rank $rank: $line"
    [[ -z ${4:-} || $line == *"$4"* ]] || fail "$2: rank $rank: no '$4': $line"
    took=$(sed -E 's/.* after ([0-9.]+) s:.*/\1/' <<<"$line")
    at_least "$took" 2 && ! at_least "$took" 4 ||
      fail "$2: rank $rank waited $took s for a 2 s timeout"
  done
  ! at_least "$seconds" 15 || fail "$2: the job took $seconds s"
}

expect_deadline 4 skip_all_to_all_v AllToAllV "waiting for rank(s) 1"
expect_deadline 2 skip_barrier Barrier

run 4 kill_rank
((status != 0 && status != 124)) || fail "kill_rank: mpirun status $status"
! at_least "$seconds" 10 || fail "kill_rank: the job took $seconds s"
grep -q "process rank 1 .*signal 9" <<<"$output" ||
  fail "kill_rank: mpirun did not name rank 1"
grep -q "ran every step" <<<"$output" && fail "kill_rank: the others went on"

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
