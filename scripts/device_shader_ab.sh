#!/bin/bash
# On the lent GPU machine (after scripts/device_bundle.sh here; carry [".dev/vk", ".gl"]): two shader trees, OLD and
# NEW (directories under .dev/vk, e.g. `git archive REV shaders | tar -x --strip-components=1 -C .dev/vk/DIR`),
# parity-checked (NEW) and timed against each other through --shader-dir in one machine start, alternated twice:
#   the int8 ladder products and the decode MoE (cmfx-bench-vk), then the V4-Flash decode — the standard
#   43-layer command (docs/PERF.md) where the card holds it (> 100 GB), else 12 layers.
# Usage: bash scripts/device_shader_ab.sh OLD NEW [BENCH_FILTER [ROUNDS]] 2>&1 | tee $OUT/ab.log
#   ROUNDS (default 2): old/new alternations of the benchmarks and of the 12-layer decode ('' for the default filter)
set -u
OLD=$1 NEW=$2
F=${3:-'^vk_matvec_i8/q2tp/|^vk_matvec_i8/q4tp/4096x8192|^vk_matvec_chain/q2tp/4096x8192|^vk_moe_b1/'}
R=$(seq 1 "${4:-2}")
. "$(dirname "$0")/../.dev/vk/env.sh"
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
M='--synthetic v4-flash --weights q2tp --expert-down q4tp --dense q4tp --act i8 --shared-expert routed --prompt 512'
el parity "$NEW"
P='matvec_i8/q2tp|matvec_i8/q4tp|moe_i8/q2tp|matvec/q2tp|model_v4/-/cmf'
timeout 60 ./cmfx-parity --shader-dir "$NEW" --filter "$P" 2>&1 | tail -2
for r in $R; do for sd in "$OLD" "$NEW"; do el bench "$sd"
  timeout 45 ./cmfx-bench-vk --shader-dir "$sd" --benchmark_min_time=0.05 --benchmark_filter="$F" 2>&1 |
    grep "^vk_\|^read roofline" | awk '{print $1, $2, $3, $(NF-2), $NF}'
done; done
for r in $R; do for sd in "$OLD" "$NEW"; do
  if [ "$MEM" -gt 100000 ]; then
    [ "$r" != 1 ] && continue  # the 43-layer runs take ~2-3 minutes each: once per tree
    el standard "$sd"
    timeout 170 ./cmfx bench --shader-dir "$sd" $M --tokens 256 --ctx 16384 --prefill-reps 3 2>&1 |
      grep -v "^ *$" | tail -9
  else
    el decode12 "$sd"
    timeout 50 ./cmfx bench --shader-dir "$sd" $M --tokens 256 --ctx 4096 --no-far --prefill-chunk 512 \
      --prefill-reps 1 --layers 12 2>&1 | grep -i "^decode\|^prefill"
  fi
done; done
el done
