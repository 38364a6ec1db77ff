#!/usr/bin/env bash
# Command-line contract of `cmfx ppl` / `cmfx run` and the make-toy dtype profiles used by the model gates.
# usage: cli_model_test.sh CMFX TMPDIR
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

"$CMFX" make-toy --out "$T/f32.cmf" --quant f32 >/dev/null 2>&1
check "make-toy --quant f32 (CMF) exit 0" test $? -eq 0
"$CMFX" make-toy --out "$T/rel-f32" --layout release --quant f32 >/dev/null 2>&1
check "make-toy --layout release --quant f32 exit 0" test $? -eq 0
"$CMFX" make-toy --out "$T/rel" --layout release --quant native >/dev/null 2>&1
check "make-toy --layout release --quant native exit 0" test $? -eq 0
"$CMFX" make-toy --out "$T/bad.cmf" --quant native >/dev/null 2>"$T/native.err"
check "make-toy --quant native with CMF exits 2" test $? -eq 2
check "... and says why" grep -q "CMF cannot store" "$T/native.err"
"$CMFX" make-toy --out "$T/bad" --layout release --quant q4tp >/dev/null 2>&1
check "make-toy --layout release --quant q4tp exits 2" test $? -eq 2

for i in $(seq 1 80); do echo $(( (i * 7919) % 129280 )); done >"$T/ids.txt"
"$CMFX" ppl "$T/f32.cmf" --ids-file "$T/ids.txt" --threads 1 >"$T/ppl_cmf.txt" 2>/dev/null
check "ppl exit 0" test $? -eq 0
check "ppl last line is 'ppl <value> tokens <n>'" grep -qE '^ppl [0-9]+\.[0-9]{6} tokens 79$' <(tail -n 1 "$T/ppl_cmf.txt")
"$CMFX" ppl "$T/rel-f32" --ids-file "$T/ids.txt" --threads 1 --chunk 7 >"$T/ppl_rel.txt" 2>/dev/null
check "ppl: CMF f32 == release f32 (chunked) as strings" cmp -s "$T/ppl_cmf.txt" "$T/ppl_rel.txt"
"$CMFX" ppl "$T/rel" --ids-file "$T/ids.txt" --threads 2 >"$T/ppl_native.txt" 2>/dev/null
check "ppl on the FP8/FP4 release toy exit 0" test $? -eq 0
echo "0 5 x" >"$T/bad_ids.txt"
"$CMFX" ppl "$T/f32.cmf" --ids-file "$T/bad_ids.txt" >/dev/null 2>"$T/bad_ids.err"
check "ppl rejects a non-id with exit 2" test $? -eq 2
check "... naming it" grep -q "'x' is not a token id" "$T/bad_ids.err"

"$CMFX" run "$T/f32.cmf" --raw-ids "0 5 9" -n 6 --threads 1 >"$T/run.txt" 2>/dev/null
check "run exit 0" test $? -eq 0
check "run prints 6 ids" grep -qE '^[0-9]+( [0-9]+){5}$' <(head -n 1 "$T/run.txt")
check "run prints tok/s" grep -qE '^prefill 3 tokens .* tok/s, decode 5 tokens .* tok/s$' <(tail -n 1 "$T/run.txt")
"$CMFX" run "$T/rel-f32" --raw-ids "0 5 9" -n 6 --threads 1 >"$T/run_rel.txt" 2>/dev/null
check "run: CMF f32 and release f32 generate the same ids" cmp -s <(head -n 1 "$T/run.txt") <(head -n 1 "$T/run_rel.txt")
"$CMFX" run "$T/f32.cmf" --raw-ids "0,5, 9," -n 6 --threads 1 >"$T/run_commas.txt" 2>/dev/null
check "run --raw-ids with commas == with spaces" cmp -s <(head -n 1 "$T/run.txt") <(head -n 1 "$T/run_commas.txt")
"$CMFX" run "$T/f32.cmf" --raw-ids "0 5 $(printf 'y%.0s' {1..300})" -n 2 >/dev/null 2>"$T/long_bad.err"
check "run rejects a long non-id with exit 2" test $? -eq 2
check "... naming its entry, cut to 40 characters" grep -q "entry 2 'y\{40\}\.\.\.' is not a token id" "$T/long_bad.err"
"$CMFX" run "$T/f32.cmf" --raw-ids "0 999999" -n 2 >/dev/null 2>"$T/oov.err"
check "run rejects an id outside the vocabulary with exit 2" test $? -eq 2

# --act (activation precision of the q4tp/q2tp/MXFP4 matmuls): f32 default, i8 runs, anything else is a usage error.
"$CMFX" make-toy --out "$T/q4.cmf" >/dev/null 2>&1
check "make-toy q4tp (default) exit 0" test $? -eq 0
"$CMFX" ppl "$T/q4.cmf" --ids-file "$T/ids.txt" --threads 1 >"$T/ppl_q4.txt" 2>/dev/null
"$CMFX" ppl "$T/q4.cmf" --ids-file "$T/ids.txt" --threads 1 --act f32 >"$T/ppl_q4_f32.txt" 2>/dev/null
check "ppl --act f32 == the default, as strings" cmp -s "$T/ppl_q4.txt" "$T/ppl_q4_f32.txt"
"$CMFX" ppl "$T/q4.cmf" --ids-file "$T/ids.txt" --threads 1 --act i8 >"$T/ppl_q4_i8.txt" 2>/dev/null
check "ppl --act i8 exit 0" test $? -eq 0
check "ppl --act i8 prints 'ppl <value> tokens 79'" grep -qE '^ppl [0-9]+\.[0-9]{6} tokens 79$' <(tail -n 1 "$T/ppl_q4_i8.txt")
"$CMFX" run "$T/q4.cmf" --raw-ids "0 5 9" -n 4 --threads 1 --act i8 >"$T/run_i8.txt" 2>/dev/null
check "run --act i8 exit 0" test $? -eq 0
check "run --act i8 prints 4 ids" grep -qE '^[0-9]+( [0-9]+){3}$' <(head -n 1 "$T/run_i8.txt")
"$CMFX" ppl "$T/q4.cmf" --ids-file "$T/ids.txt" --act bogus >/dev/null 2>"$T/act.err"
check "ppl --act bogus exits 2" test $? -eq 2
check "... naming the flag" grep -q -- "--act" "$T/act.err"
"$CMFX" run "$T/q4.cmf" --raw-ids "0 5" --act i16 >/dev/null 2>"$T/act_run.err"
check "run --act i16 exits 2" test $? -eq 2
"$CMFX" run --help >"$T/run_help.txt" 2>&1
check "run --help names --act and its default" grep -q -- "--act f32|i8.*f32 (default" <(tr -s ' \n' ' ' <"$T/run_help.txt")

echo "cli_model: $pass passed, $fail failed"
rm -rf "$T"
test "$fail" -eq 0
