#!/usr/bin/env bash
# The main job on the built-in toy model. Grows with the project: today it writes the toy CMF file,
# describes it and verifies every tensor hash.
set -euo pipefail
BUILD=${1:-build}
"$BUILD/cmfx"
