#!/bin/sh
# quickstart.sh — install what flashlab needs (Debian/Ubuntu), build it, and run it.
#   tools/quickstart.sh tour      configure + build (preset default), then build/flashlab tour
#   tools/quickstart.sh test      configure + build + ctest (the default workflow preset)
#   tools/quickstart.sh sanitize  the same with AddressSanitizer + UBSan, CPU only (build-sanitize/),
#                                 built by clang with the libFuzzer harnesses of tests/fuzz (ctest
#                                 label fuzz) when clang is there; by the default compiler without
#                                 them otherwise
# Missing packages: as root they are installed with apt-get; otherwise the one command to run is
# printed and the script exits 1. clang and libclang-rt-dev (its libFuzzer runtime) are optional:
# installed as root for `sanitize` when missing, else that build goes on without the fuzzers.
set -eu

cd "$(dirname "$0")/.."

usage() {
    echo "usage: tools/quickstart.sh tour|test|sanitize" >&2
    exit 2
}

[ $# -eq 1 ] || usage
case "$1" in
    tour | test | sanitize) ;;
    *) usage ;;
esac

# cmake >= 3.25 (presets with workflows)
cmake_ok() {
    command -v cmake >/dev/null 2>&1 || return 1
    version=$(cmake --version | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    set -- $version
    [ $# -eq 2 ] || return 1
    [ "$1" -gt 3 ] || { [ "$1" -eq 3 ] && [ "$2" -ge 25 ]; }
}

missing=""
cmake_ok || missing="$missing cmake"
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || missing="$missing gcc"
# python3-nbclient .. python3-matplotlib: the notebook tests (ctest -L notebooks)
for pkg in libopenblas-dev libcjson-dev python3-numpy \
    python3-nbclient python3-nbformat python3-ipykernel python3-matplotlib; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update && apt-get install -y $missing
        cmake_ok || { echo "quickstart: flashlab needs cmake >= 3.25; this system's is older" >&2; exit 1; }
    else
        echo "sudo apt-get install -y$missing"
        exit 1
    fi
fi

# clang and its libFuzzer runtime, for the fuzzers of the sanitize build (optional).
if [ "$1" = sanitize ]; then
    fuzz_missing=""
    command -v clang >/dev/null 2>&1 || fuzz_missing=" clang"
    dpkg -s libclang-rt-dev >/dev/null 2>&1 || fuzz_missing="$fuzz_missing libclang-rt-dev"
    if [ -n "$fuzz_missing" ] && [ "$(id -u)" -eq 0 ]; then
        { apt-get update && apt-get install -y $fuzz_missing; } ||
            echo "quickstart: could not install$fuzz_missing" >&2
    fi
fi

case "$1" in
    tour)
        cmake --preset default
        cmake --build --preset default
        exec build/flashlab tour
        ;;
    test) exec cmake --workflow --preset default ;;
    sanitize)
        # The sanitize preset, with clang and the fuzzers where clang is found (tests/fuzz/README.md);
        # the test preset then runs them too (label fuzz).
        if command -v clang >/dev/null 2>&1; then
            cmake --preset sanitize -DCMAKE_C_COMPILER=clang -DFLASHLAB_FUZZ=ON
        else
            echo "quickstart: clang not found: the sanitize build uses the default C compiler, without the fuzzers"
            cmake --preset sanitize
        fi
        cmake --build --preset sanitize
        exec ctest --preset sanitize
        ;;
esac
