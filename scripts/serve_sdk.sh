#!/usr/bin/env bash
# Installs the OpenAI Node SDK used by tests/serve/sdk_test.mjs: npm ci in tests/serve/node (package `openai`,
# pinned by package-lock.json), only when node_modules is missing or older than the lock file. Idempotent and quick
# when already installed. Prints the node_modules path.
#
#   bash scripts/serve_sdk.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_DIR="$ROOT/tests/serve/node"
STAMP="$NODE_DIR/node_modules/.package-lock.json"
PKG="$NODE_DIR/node_modules/openai/package.json"

if [ ! -f "$STAMP" ] || [ "$NODE_DIR/package-lock.json" -nt "$STAMP" ] || [ ! -f "$PKG" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "serve_sdk: 'npm' not found; Node.js and npm install the OpenAI SDK (scripts/deps.sh)" >&2
    exit 1
  fi
  echo "serve_sdk: npm ci in tests/serve/node" >&2
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) >&2
fi
if [ ! -f "$PKG" ]; then
  echo "serve_sdk: $PKG missing after npm ci" >&2
  exit 1
fi
echo "$NODE_DIR/node_modules"
