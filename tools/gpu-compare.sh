#!/usr/bin/env bash
# gpu-compare.sh REF_TAR — the same GPU benchmarks on two builds in one run, for a refactor that
# must not change speed: this checkout (built by tools/gpu-check.sh or here, in build-gpu) and a
# reference tree (a `git archive` tarball of an earlier commit, built in /tmp/flashlab-ref).
# The two binaries take turns on each shape, ROUNDS times, so drift of a shared machine hits both.
#
#   git archive -o .deps/ref.tar <commit>      # here: .deps travels with the checkout
#   tools/gpu-compare.sh .deps/ref.tar         # on the GPU machine, after tools/gpu-check.sh
#
# Environment: STAGES="05 06 12" (benched stages), NEW_VARIANTS="05=tuned" (bench that variant of
# a stage in this checkout against the reference's default one: a kernel that moved to a named
# variant, as stage 05's tuned kernel did), ARGS (extra bench flags, default
# "--T 4096 --B 4 --H 16 --reps 10"), ROUNDS=3, CUDA_ARCH=90, OUT=./gpu-out.
# Prints one line per (stage, direction, d): the median ms of each build over the rounds and the
# ratio new / reference. Exit 1 when a build or a bench fails.
set -uo pipefail
ref_tar=${1:?usage: tools/gpu-compare.sh REF_TAR}
OUT=${OUT:-./gpu-out}
STAGES=${STAGES:-05 06 12}
ARGS=${ARGS:---T 4096 --B 4 --H 16 --reps 10}
ROUNDS=${ROUNDS:-3}
CUDA_ARCH=${CUDA_ARCH:-90}
mkdir -p "$OUT"
DEPS=/opt/deps/usr
hints=(-DCMAKE_DISABLE_FIND_PACKAGE_cJSON=ON -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH -DCMAKE_BUILD_TYPE=Release)
if [ -f $DEPS/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so ]; then
  hints+=(-DBLAS_LIBRARIES=$DEPS/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so
          -DCBLAS_INCLUDE_DIR=$DEPS/include/x86_64-linux-gnu/openblas-pthread)
fi
export CMAKE_PREFIX_PATH=$DEPS${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}

build() { # build SRC_DIR BUILD_DIR
  cmake -S "$1" -B "$2" "${hints[@]}" >"$OUT/compare_build_$(basename "$2").log" 2>&1 &&
    cmake --build "$2" -j"$(nproc)" --target flashlab >>"$OUT/compare_build_$(basename "$2").log" 2>&1
}
rm -rf /tmp/flashlab-ref && mkdir -p /tmp/flashlab-ref && tar -xf "$ref_tar" -C /tmp/flashlab-ref || exit 1
[ -x build-gpu/flashlab ] || build . build-gpu || { echo "gpu-compare: this checkout did not build"; exit 1; }
build /tmp/flashlab-ref /tmp/flashlab-ref/build || { echo "gpu-compare: the reference did not build"; exit 1; }
new=build-gpu/flashlab ref=/tmp/flashlab-ref/build/flashlab

# bench_ms BINARY STAGE DIRECTION D [VARIANT]: the median ms the bench reports for that variant
# ("" = the default one)
# (nan when the bench fails or prints no row for the default variant)
bench_ms() {
  "$1" bench --device cuda --stages "$2" --direction "$3" --d "$4" ${5:+--variant "$5"} $ARGS --json 2>/dev/null |
    VARIANT="${5:-}" python3 -c '
import json, os, sys
try:
    r = [x for x in json.load(sys.stdin) if x["variant"] == os.environ["VARIANT"]]
    print(r[0]["time_ms"] if r and r[0]["error"] is None else "nan")
except (ValueError, KeyError, IndexError):
    print("nan")'
}
# The variant of stage $1 that this checkout benches (NEW_VARIANTS), "" for the default one.
new_variant() { echo " ${NEW_VARIANTS:-} " | sed -n "s/.* $1=\([^ ]*\) .*/\1/p"; }
# Whether stage $1's default CUDA implementation has a backward pass (flashlab list's features).
has_backward() { "$new" list | awk -v s="$1" '$1 == s && $3 == "cuda" && $4 == "-"' | grep -q backward; }
median() { python3 -c 'import sys,statistics as s; v=[float(x) for x in sys.argv[1:] if x!="nan"]; print(s.median(v) if v else float("nan"))' "$@"; }

printf "%-5s  %-4s  %4s  %12s  %12s  %9s\n" stage dir d "ref ms" "new ms" "new/ref" | tee "$OUT/compare.txt"
status=0
for s in $STAGES; do
  for dir in fwd bwd; do
    [ "$dir" = bwd ] && ! has_backward "$s" && continue
    for d in 64 128; do
      r=() n=()
      for _ in $(seq "$ROUNDS"); do
        r+=("$(bench_ms $ref "$s" $dir $d)")
        n+=("$(bench_ms $new "$s" $dir $d "$(new_variant "$s")")")
      done
      mr=$(median "${r[@]}") mn=$(median "${n[@]}")
      ratio=$(python3 -c "import math; a,b=$mr,$mn; print('%.3f' % (b/a) if a==a and b==b else 'nan')")
      [ "$ratio" = nan ] && status=1
      printf "%-5s  %-4s  %4s  %12.3f  %12.3f  %9s\n" "$s" $dir $d "$mr" "$mn" "$ratio" | tee -a "$OUT/compare.txt"
    done
  done
done
exit $status
