#!/usr/bin/env bash
set -euo pipefail
"$1" >/dev/null
echo "1 passed, 0 failed"
