#!/usr/bin/env bash
# Installs the OpenAI Node SDK used by tests/serve/node/sdk_test.mjs (npm `openai`, pinned by
# tests/serve/node/package-lock.json). Prints the path of its package.json.
#
#   bash scripts/serve_sdk.sh
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/npm_ci.sh" tests/serve/node openai/package.json
