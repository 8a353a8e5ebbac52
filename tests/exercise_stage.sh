#!/bin/sh
# exercise_stage.sh FLASHLAB SOURCE_DIR SCRATCH STAGE DEVICE [CMAKE_ARGS...]
# The acceptance test of `flashlab exercise` for one stage and device (tests/exercise.cmake):
#   1. FLASHLAB writes the student copy of STAGE into SCRATCH/copy_STAGE;
#   2. a scratch build tree, SCRATCH/build, configured with -DFLASHLAB_STUDENT_DIR set to the copy
#      and CMAKE_ARGS, builds only the student executable: the copy must compile;
#   3. `flashlab_student check STAGE --variant student --device DEVICE` must exit 1: a mismatch,
#      the TODOs are real (not a crash, 2, or 3 = cases refused);
#   4. the stage's own .c/.cu/.h files are copied over the copy, rebuilt, and the same check must
#      exit 0;
#   5. where tests/io_plants/STAGE_DEVICE.sh exists, it edits those files into a copy that computes
#      the right outputs but moves more HBM bytes than the stage (e.g. for 07: every key tile
#      walked); rebuilt, the check must exit 1 with an 'IO FAIL' line naming the extra bytes, and
#      pass with --no-io-check (the outputs are right: only the traffic fails).
# With DEVICE cuda and no CUDA device, this script exits 77 first, before it builds anything (the
# CUDA scratch build takes minutes and its check could only skip). The scratch tree is kept between runs, so only the copy's files,
# the tool's sources (common/cli/) and the link are rebuilt after the first run.
# FLASHLAB_EXERCISE_JOBS: build jobs (2).
set -u
flashlab=$1 source=$2 scratch=$3 stage=$4 device=$5
shift 5
copy=$scratch/copy_$stage
tree=$scratch/build
log=$scratch/log_$stage
mkdir -p "$scratch"

fail() {
    echo "exercise_stage: stage $stage ($device): $*" >&2
    exit 1
}

# Builds the copy as it is now; shows the compiler's messages and fails when it does not build.
build_copy() {
    cmake -S "$source" -B "$tree" -DFLASHLAB_STUDENT_DIR="$copy" "$@" > "$log" 2>&1 ||
        { tail -n 30 "$log"; fail "configuring the scratch build failed"; }
    cmake --build "$tree" --target flashlab_student --parallel "${FLASHLAB_EXERCISE_JOBS:-2}" > "$log" 2>&1 ||
        { grep -E -A3 'error|Error' "$log" | head -n 40; fail "the copy in $copy does not compile"; }
}

# The check's exit status, with its first lines shown.
check_copy() {
    "$tree/flashlab_student" check "$stage" --variant student --device "$device" > "$log" 2>&1
    rc=$?
    head -n 12 "$log"
    return $rc
}

if [ "$device" = cuda ]; then
    "$flashlab" check 01 "$source/golden/cases/plain_t1" --device cuda > "$log" 2>&1
    [ $? -eq 77 ] && { cat "$log"; exit 77; }
fi

rm -rf "$copy"
"$flashlab" exercise "$stage" "$copy" || fail "flashlab exercise failed"
build_copy "$@"
echo "== the copy as written (TODOs left in): expecting exit 1"
check_copy
rc=$?
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 1 ] || fail "the copy with its TODOs exited $rc, expected 1 (a mismatch)"

folder=$(cd "$source/stages" && ls -d "${stage}"_* | head -n 1)
for f in "$source/stages/$folder"/*.c "$source/stages/$folder"/*.cu "$source/stages/$folder"/*.h; do
    [ -f "$f" ] && cp "$f" "$copy/"
done
build_copy "$@"
echo "== the stage's own files copied in: expecting exit 0"
check_copy
rc=$?
[ "$rc" -eq 0 ] || fail "the unmodified stage $folder, built as the student variant, exited $rc, expected 0"
plant=$source/tests/io_plants/${stage}_$device.sh
if [ -f "$plant" ]; then
    snapshot=$scratch/snapshot_$stage
    rm -rf "$snapshot" && cp -r "$copy" "$snapshot"
    (cd "$copy" && sh "$plant") || fail "the IO plant $plant did not apply"
    diff -r "$snapshot" "$copy" > /dev/null && fail "the IO plant $plant changed nothing (the stage's code moved?)"
    build_copy "$@"
    echo "== the IO plant (right outputs, more HBM traffic): expecting exit 1 with IO FAIL"
    check_copy
    rc=$?
    [ "$rc" -eq 1 ] || fail "the IO plant exited $rc, expected 1"
    grep -m 1 "IO FAIL: .* more HBM bytes than the reference" "$log" ||
        fail "the IO plant failed, but not on its traffic (no 'IO FAIL' line)"
    "$tree/flashlab_student" check "$stage" --variant student --device "$device" --json 2>/dev/null |
        grep -q '"io_check": "fail"' || fail "the IO plant's JSON grade has no case with \"io_check\": \"fail\""
    "$tree/flashlab_student" check "$stage" --variant student --device "$device" --no-io-check > "$log" 2>&1 ||
        { tail -n 12 "$log"; fail "the IO plant's outputs are wrong (it fails even with --no-io-check)"; }
    echo "exercise_stage: stage $stage ($device): the copy compiles and fails; the stage itself passes; its IO plant fails on traffic alone"
    exit 0
fi
echo "exercise_stage: stage $stage ($device): the copy compiles and fails; the stage itself passes"
