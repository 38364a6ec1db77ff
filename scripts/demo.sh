#!/usr/bin/env bash
# `make demo`: the main job on the built-in toy model. Today cmfx reads, describes and verifies model files;
# text generation arrives with the model-graph and tokenizer work (see README, "Status").
set -euo pipefail
BUILD=${1:-build}
CMFX="$BUILD/cmfx"
OUT="$BUILD/demo"
mkdir -p "$OUT"
echo "== cmfx make-toy: the deterministic DeepSeek-V4 toy (real tensor names, tiny dimensions)"
"$CMFX" make-toy --out "$OUT/toy-v4.cmf"
echo
echo "== cmfx info"
"$CMFX" info "$OUT/toy-v4.cmf"
echo
echo "== cmfx verify (every tensor hash)"
"$CMFX" verify "$OUT/toy-v4.cmf"
echo
echo "The toy's weights are random: it is a test fixture, not a language model."
echo "For a real model: cat the published parts into one .cmf file, then"
echo "  $CMFX info  DeepSeek-V4-Flash-0731-q2tp.cmf"
echo "  $CMFX verify DeepSeek-V4-Flash-0731-q2tp.cmf"
