#!/usr/bin/env bash
# `npm ci` in DIR (pinned by its package-lock.json) only when node_modules is missing, older than the lock file,
# or lacks FILE (a path inside node_modules that the caller needs). Idempotent and quick when already installed.
# Prints the absolute path of FILE.
#
#   bash scripts/npm_ci.sh DIR FILE        e.g. scripts/npm_ci.sh tests/serve/node openai/package.json
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_DIR="$ROOT/$1"
WANT="$NODE_DIR/node_modules/$2"
STAMP="$NODE_DIR/node_modules/.package-lock.json"

if [ ! -f "$STAMP" ] || [ "$NODE_DIR/package-lock.json" -nt "$STAMP" ] || [ ! -f "$WANT" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm_ci: 'npm' not found; Node.js and npm are installed by scripts/deps.sh" >&2
    exit 1
  fi
  echo "npm_ci: npm ci in $1" >&2
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) >&2
fi
if [ ! -f "$WANT" ]; then
  echo "npm_ci: $WANT missing after npm ci" >&2
  exit 1
fi
echo "$WANT"
