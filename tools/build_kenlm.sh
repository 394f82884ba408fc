#!/usr/bin/env bash
# Build KenLM's training tools (lmplz, build_binary) into tools/bin/.
#
# Usage: tools/build_kenlm.sh [VENV]      (VENV defaults to .venv)
#
# Idempotent: exits at once when tools/bin/lmplz and tools/bin/build_binary
# both exist and run. Otherwise it installs the Debian build dependencies that
# are missing (needs root; runs `apt-get update` once first), downloads the
# kenlm 0.3.0 source distribution from PyPI with the venv's pip into
# tools/build/, and builds with the venv's cmake (PyPI package `cmake`) on
# 2 cores (~25 s, measured; see /work/shared/notes/dependencies.md).
# The PyPI wheel `kenlm` only has the query binding; it cannot train models.
set -euo pipefail

KENLM_VERSION=0.3.0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
BIN="$ROOT/tools/bin"
BUILD="$ROOT/tools/build"
JOBS="${JOBS:-2}"

tools_work() {
    # lmplz --help exits 1 but prints its usage; a broken binary fails to load.
    [ -x "$BIN/lmplz" ] && [ -x "$BIN/build_binary" ] || return 1
    # Capture first: `cmd | grep -q` under pipefail fails when grep exits early.
    local out
    out="$("$BIN/lmplz" --help 2>&1 || true)"
    [[ "$out" == *"Builds unpruned language models"* ]] || return 1
    out="$("$BIN/build_binary" --help 2>&1 || true)"
    [[ "$out" == *"Usage:"* ]] || return 1
}

if tools_work; then
    echo "kenlm tools already built: $BIN/lmplz $BIN/build_binary"
    exit 0
fi

for tool in "$VENV/bin/pip" "$VENV/bin/cmake"; do
    if [ ! -x "$tool" ]; then
        echo "error: $tool not found (pass the venv path as \$1; it needs pip and the PyPI cmake package)" >&2
        exit 1
    fi
done

DEBS=(build-essential libboost-program-options-dev libboost-system-dev libboost-thread-dev
      libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev)
missing=()
for pkg in "${DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing Debian build dependencies: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: missing packages ${missing[*]} and not running as root" >&2
        exit 1
    fi
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

mkdir -p "$BUILD" "$BIN"
SDIST="$BUILD/kenlm-$KENLM_VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    # --no-build-isolation: with --no-binary :all: pip would otherwise compile the
    # sdist's build requirement cmake from source (many minutes) just to read metadata.
    "$VENV/bin/pip" download --no-binary :all: --no-deps --no-build-isolation \
        --dest "$BUILD" "kenlm==$KENLM_VERSION"
fi
SRC="$BUILD/kenlm-$KENLM_VERSION"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    rm -rf "$SRC"
    tar -xzf "$SDIST" -C "$BUILD"
fi

"$VENV/bin/cmake" -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release
"$VENV/bin/cmake" --build "$SRC/build" --target lmplz build_binary -j "$JOBS"

install -m 0755 "$SRC/build/bin/lmplz" "$SRC/build/bin/build_binary" "$BIN/"
if ! tools_work; then
    echo "error: built $BIN/lmplz and $BIN/build_binary but they do not run" >&2
    exit 1
fi
echo "built $BIN/lmplz $BIN/build_binary"
