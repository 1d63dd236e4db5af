#!/usr/bin/env bash
# The README's test command: installs what is missing, builds xl with its
# tests, and runs every test (unit, end-to-end on loopback; GPU tests skip
# themselves where there is no device).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${XL_BUILD_DIR:-$ROOT/build}"

"$ROOT/deploy/install-deps"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
cd "$BUILD"
ctest --output-on-failure --timeout 900 "$@"
