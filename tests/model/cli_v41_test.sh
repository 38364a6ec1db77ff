#!/usr/bin/env bash
# Command-line contract of the V4.1 toy: `cmfx ppl` and `cmfx run --raw-ids` run V4.1 files (CMF and release layout
# agree, thread count does not matter); `cmfx info --state` reports the packed cache storage (v41_state_bytes: the
# model card's 890 B/token global KV at the release's shape, the toy's own at its widths). Text generation on V4.1
# (run -p / -i, ppl --file) needs the tokenizer: cli_run_test.sh.
# usage: cli_v41_test.sh CMFX TMPDIR
set -u
CMFX=$1
T=$2
rm -rf "$T" && mkdir -p "$T"
pass=0
fail=0
check() {  # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}

"$CMFX" make-toy --arch v41 --out "$T/v41.cmf" --quant f32 >/dev/null 2>&1
check "make-toy --arch v41 (CMF) exit 0" test $? -eq 0
"$CMFX" make-toy --arch v41 --out "$T/rel" --layout release --quant f32 >/dev/null 2>&1
check "make-toy --arch v41 --layout release exit 0" test $? -eq 0

for i in $(seq 1 80); do echo $(( (i * 7919) % 129280 )); done >"$T/ids.txt"
"$CMFX" ppl "$T/v41.cmf" --ids-file "$T/ids.txt" --threads 1 --chunk 20 >"$T/ppl.txt" 2>"$T/ppl.err"
check "V4.1 ppl exit 0" test $? -eq 0
check "V4.1 ppl last line is 'ppl <value> tokens 79'" grep -qE '^ppl [0-9]+\.[0-9]{6} tokens 79$' <(tail -n 1 "$T/ppl.txt")
check "V4.1 ppl says the model has 12 layers" grep -q "12 layers" "$T/ppl.err"
"$CMFX" ppl "$T/v41.cmf" --ids-file "$T/ids.txt" --threads 1 >"$T/ppl_whole.txt" 2>/dev/null
check "V4.1 ppl --chunk 20 == one call, as strings (the file is one prefill)" cmp -s "$T/ppl.txt" "$T/ppl_whole.txt"
"$CMFX" ppl "$T/rel" --ids-file "$T/ids.txt" --threads 2 --chunk 20 >"$T/ppl_rel.txt" 2>/dev/null
check "V4.1 ppl: CMF f32 (1 thread) == release f32 (2 threads) as strings" cmp -s "$T/ppl.txt" "$T/ppl_rel.txt"
"$CMFX" run "$T/v41.cmf" --raw-ids "0 5 9" -n 6 --threads 1 >"$T/run.txt" 2>/dev/null
check "V4.1 run --raw-ids exit 0" test $? -eq 0
check "V4.1 run prints 6 ids" grep -qE '^[0-9]+( [0-9]+){5}$' <(head -n 1 "$T/run.txt")
"$CMFX" run "$T/rel" --raw-ids "0 5 9" -n 6 --threads 2 >"$T/run_rel.txt" 2>/dev/null
check "V4.1 run: CMF and release generate the same ids" cmp -s <(head -n 1 "$T/run.txt") <(head -n 1 "$T/run_rel.txt")
"$CMFX" run "$T/v41.cmf" --raw-ids "0 999999" -n 2 >/dev/null 2>"$T/oov.err"
check "V4.1 run rejects an id outside the vocabulary with exit 2" test $? -eq 2
check "... naming it" grep -q "999999 is outside the vocabulary" "$T/oov.err"

# The toy (head_dim 64 → 36 B rows, index_head_dim 32 → 17 B rows; sources at ratios 2, 2, 1): at 4096 tokens
# 2048 + 2048 + 4096 rows × 53 B = 434176 B global KV; 15 FP8 rings × 16 rows × 66 B = 15840 B; two ratio-2
# compressors × 2 × 2 × 64 × 4 B = 2048 B; 3 Engram ids = 12 B.
"$CMFX" info "$T/v41.cmf" --state --ctx 4096 >"$T/info_toy.txt" 2>&1
check "info --state on the V4.1 toy exit 0" test $? -eq 0
check "toy global KV 434176 bytes (106.0 per token)" grep -qE '^  global KV +434176 bytes \(106\.0 bytes per token' "$T/info_toy.txt"
check "toy window rings 15840 bytes (15 rings x 16 rows)" grep -qE '^  window rings .* 15840 bytes \(15 rings x 16 rows\)' "$T/info_toy.txt"
check "toy compressor 2048 bytes" grep -qE '^  compressor pending groups +2048 bytes' "$T/info_toy.txt"
check "toy Engram ids 12 bytes" grep -qE '^  Engram look-back ids +12 bytes' "$T/info_toy.txt"
check "toy total 452076 bytes" grep -qE '^  total +452076 bytes' "$T/info_toy.txt"
"$CMFX" info "$T/v41.cmf" --state --ctx 4096 --json >"$T/info_toy.json" 2>&1
check "info --state --json carries global_kv_bytes" /usr/bin/python3 -c "
import json,sys; j=json.load(open('$T/info_toy.json'))['state']; sys.exit(0 if j['global_kv_bytes']==434176 and j['main_kv_bytes']==294912 else 1)"

# The release's shape (config only; the toy's tensors stay, info does not bind them): the model card's figure.
/usr/bin/python3 - "$T/rel/config.json" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
t = j["text_config"]
t.update(num_hidden_layers=40, compress_ratios=[0, 0] + [2] * 18 + [1] * 20 + [0, 0, 0],
         kv_source_layer_ids=[2, 8, 14, 20], index_source_layer_ids=[2, 8, 14, 20, 24, 28, 32, 36],
         candidate_source_layer_id=20, candidate_topk_blocks=2048, candidate_block_size=8, index_topk=512,
         head_dim=512, index_head_dim=128, qk_rope_head_dim=64, sliding_window=128, engram_layer_ids=[1, 14],
         engram_multipliers=[[1, 3, 5, 7], [1, 3, 5, 7]])
t.pop("engram_num_embeddings", None)
json.dump(j, open(p, "w"))
PY
"$CMFX" info "$T/rel" --state --ctx 4096 >"$T/info_rel.txt" 2>&1
check "info --state on a release-shaped V4.1 config exit 0" test $? -eq 0
check "release global KV 3645440 bytes = 890 per token (model card)" \
  grep -qE '^  global KV +3645440 bytes \(890\.0 bytes per token; KV sources at ratios \[2,2,2,1\]' "$T/info_rel.txt"
check "release compressed KV 2949120 + index keys 696320" \
  bash -c "grep -qE '^  compressed KV .* 2949120 bytes' '$T/info_rel.txt' && grep -qE '^  index keys .* 696320 bytes' '$T/info_rel.txt'"
check "release window rings 2906112 bytes (43 rings x 128 rows)" \
  grep -qE '^  window rings .* 2906112 bytes \(43 rings x 128 rows\)' "$T/info_rel.txt"
check "release compressor 24576 bytes, Engram 12" \
  bash -c "grep -qE '^  compressor pending groups +24576 bytes' '$T/info_rel.txt' && grep -qE '^  Engram look-back ids +12 bytes' '$T/info_rel.txt'"
check "release total 6576140 bytes" grep -qE '^  total +6576140 bytes' "$T/info_rel.txt"

echo "cli_v41: $pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then for f in "$T"/info_*.txt; do echo "== $f"; cat "$f"; done; fi
rm -rf "$T"
test "$fail" -eq 0
