#!/usr/bin/env bash
# Build the fastText command-line tool (training) into tools/bin/fasttext.
#
# Usage: tools/build_fasttext.sh [VENV]      (VENV defaults to .venv)
#
# Idempotent: exits at once when tools/bin/fasttext exists and runs. Otherwise it
# downloads the fasttext 0.9.3 source distribution from PyPI with the venv's pip
# into tools/build/ and compiles its C++ sources (src/*.cc, main.cc included) with
# g++ -O3 -std=c++17 (the sdist has no Makefile; the same flags as its setup.py,
# measured ~60 s on 2 cores). The project's inference library `fasttext-predict`
# (module `fasttext`) cannot train, and the PyPI `fasttext` package would install
# a second module named `fasttext` over it; the CLI binary avoids the clash.
# The stage quality_classifier trains with it (stages/quality_classifier/train.py).
set -euo pipefail

FASTTEXT_VERSION=0.9.3
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
BIN="$ROOT/tools/bin"
BUILD="$ROOT/tools/build"
CXX="${CXX:-g++}"

tool_works() {
    [ -x "$BIN/fasttext" ] || return 1
    # `fasttext supervised` without arguments prints its usage and exits non-zero.
    local out
    out="$("$BIN/fasttext" supervised 2>&1 || true)"
    [[ "$out" == *"-wordNgrams"* ]] || return 1
}

if tool_works; then
    echo "fasttext already built: $BIN/fasttext"
    exit 0
fi

if [ ! -x "$VENV/bin/pip" ]; then
    echo "error: $VENV/bin/pip not found (pass the venv path as \$1)" >&2
    exit 1
fi
if ! command -v "$CXX" >/dev/null; then
    echo "error: C++ compiler $CXX not found (Debian: apt-get install build-essential)" >&2
    exit 1
fi

mkdir -p "$BUILD" "$BIN"
SDIST="$BUILD/fasttext-$FASTTEXT_VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    # --no-build-isolation: pip would otherwise build the sdist's build requirements
    # (pybind11 ...) just to read its metadata.
    "$VENV/bin/pip" download --no-binary :all: --no-deps --no-build-isolation \
        --dest "$BUILD" "fasttext==$FASTTEXT_VERSION"
fi
SRC="$BUILD/fasttext-$FASTTEXT_VERSION"
if [ ! -f "$SRC/src/main.cc" ]; then
    rm -rf "$SRC"
    tar -xzf "$SDIST" -C "$BUILD"
fi

"$CXX" -std=c++17 -O3 -funroll-loops -pthread -o "$BIN/fasttext.tmp" "$SRC"/src/*.cc
mv "$BIN/fasttext.tmp" "$BIN/fasttext"
if ! tool_works; then
    echo "error: built $BIN/fasttext but it does not run" >&2
    exit 1
fi
echo "built $BIN/fasttext"
