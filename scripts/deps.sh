#!/usr/bin/env bash
# Installs the Debian packages cmfx builds and tests with. Idempotent: packages already present are
# not downloaded again, and apt-get runs only when something is missing.
set -euo pipefail

PACKAGES=(
  cmake ninja-build pkg-config g++ clang libclang-rt-14-dev
  libeigen3-dev libxsimd-dev xtl-dev
  libvulkan-dev mesa-vulkan-drivers vulkan-tools vulkan-validationlayers
  glslang-dev glslang-tools spirv-tools
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libcpp-httplib-dev nlohmann-json3-dev libfmt-dev libcli11-dev libpcre2-dev libutf8proc-dev
  python3 python3-numpy
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js + npm run the reference tokenizer for the parity test; a machine that has them (any install) keeps its own.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} Debian packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
