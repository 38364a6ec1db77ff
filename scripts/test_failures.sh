#!/usr/bin/env bash
# After a failed `ctest`: repeats the failing cases' lines (cmfx-parity's "[ FAIL ]" and the line after it,
# GoogleTest's "[  FAILED  ]" and its assertion lines) at the end of the output, where a truncated CI log keeps them.
# usage: scripts/test_failures.sh BUILD_DIR
set -uo pipefail
log="${1:?build directory}/Testing/Temporary/LastTest.log"
echo "=== failing cases, repeated from ${log} ==="
if [[ ! -r "$log" ]]; then
  echo "(no ${log}: ctest wrote no log)"
  exit 0
fi
grep -a -h -A1 -E '^\[ FAIL \]' "$log" | cut -c1-400 | head -n 60
grep -a -h -B3 -E '^\[  FAILED  \] [A-Za-z0-9_]+\.[A-Za-z0-9_/]+ \(' "$log" | cut -c1-400 | head -n 60
exit 0
