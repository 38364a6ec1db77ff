#!/bin/sh
# Prepares what a run on the lent GPU machine carries (docs/VULKAN.md "Running on the H200"):
#   .gl/      the Vulkan loader and the glvnd libraries the NVIDIA ICD needs (Debian amd64 packages, not installed
#             here: the device script unpacks them into its own root);
#   .dev/vk/  stripped cmfx, cmfx-parity, cmfx-bench-vk and cmfx-bench-cpu of BUILD_DIR, the Debian libraries
#             the device image lacks, and env.sh, which a device script sources first (it unpacks .gl, points the
#             loader at the NVIDIA ICD, enters .dev/vk and defines `el`, a line with the seconds since it started).
# Usage: scripts/device_bundle.sh [BUILD_DIR]   (default: build). Then run with carry [".dev/vk", ".gl"], e.g.
#   bash .dev/vk/my_run.sh 2>&1 | tee $OUT/my_run.log   where my_run.sh begins with  . "$(dirname "$0")/env.sh"
# Both folders are ignored by git (.gitignore) and together stay under the device tool's 64 MiB.
set -eu
B=${1:-build}
cd "$(dirname "$0")/.."
for b in "$B/cmfx" "$B/tests/cmfx-parity" "$B/bench/cmfx-bench-vk" "$B/bench/cmfx-bench-cpu"; do
  [ -x "$b" ] && continue
  echo "device_bundle: $b is not built (ninja -C $B cmfx tests/cmfx-parity bench/cmfx-bench-vk bench/cmfx-bench-cpu)" >&2
  exit 1
done

mkdir -p .gl /tmp/cmfx-amd64/partial
o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/cmfx-amd64"
if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1 || ! ls .gl/libglx0_*.deb >/dev/null 2>&1; then
  apt-get $o update >/dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
fi

mkdir -p .dev/vk
for b in "$B/cmfx" "$B/tests/cmfx-parity" "$B/bench/cmfx-bench-vk" "$B/bench/cmfx-bench-cpu"; do
  strip -o ".dev/vk/$(basename "$b")" "$b"
done
# Debian libraries the binaries link that the device image does not have
for l in libbenchmark.so.1debian libutf8proc.so.2 libcpp-httplib.so.0.11 libpcre2-8.so.0 libbrotlidec.so.1 \
         libbrotlienc.so.1 libbrotlicommon.so.1; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
  [ -n "$p" ] || { echo "device_bundle: $l not found (scripts/deps.sh installs it)" >&2; exit 1; }
  cp -L "$p" .dev/vk/
done

cat > .dev/vk/env.sh <<'EOF'
# sourced by a device script (scripts/device_bundle.sh wrote it)
cd "$(dirname "${BASH_SOURCE[0]:-$0}")/../.."
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .dev/vk
export LD_LIBRARY_PATH=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
t0=$(date +%s)
el() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
EOF
du -sh .dev/vk .gl
