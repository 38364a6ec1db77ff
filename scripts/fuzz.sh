#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time.
# usage: scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET
set -euo pipefail
BUILD=${1:-build-fuzz}
SECONDS_PER=${2:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMFX_BUILD_FUZZ=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
fail=0
passed=0
for bin in "$BUILD"/fuzz/*_fuzz; do
  name=$(basename "$bin")
  corpus="$BUILD/corpus-$name"
  mkdir -p "$corpus"
  seeds="$ROOT/fuzz/seeds/${name%_fuzz}"
  args=("$corpus")
  [ -d "$seeds" ] && args+=("$seeds")
  echo "fuzz: $name for ${SECONDS_PER}s"
  if "$bin" -max_total_time="$SECONDS_PER" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD/$name-" "${args[@]}" >"$BUILD/$name.out" 2>&1; then
    runs=$(grep -E '^stat::number_of_executed_units' "$BUILD/$name.out" | awk '{print $2}')
    echo "fuzz: $name ok, ${runs:-?} executions, no finding"
    passed=$((passed + 1))
  else
    echo "fuzz: $name FOUND A CRASH (log: $BUILD/$name.out)"
    tail -40 "$BUILD/$name.out"
    fail=$((fail + 1))
  fi
done
echo "fuzz: $passed passed, $fail failed"
[ "$fail" -eq 0 ]
