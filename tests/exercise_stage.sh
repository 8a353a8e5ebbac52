#!/bin/sh
# exercise_stage.sh FLASHLAB SOURCE_DIR SCRATCH STAGE DEVICE [CMAKE_ARGS...]
# The acceptance test of `flashlab exercise` for one stage and device (tests/exercise.cmake):
#   1. FLASHLAB writes the student copy of STAGE into SCRATCH/copy_STAGE;
#   2. a scratch build tree, SCRATCH/build, configured with -DFLASHLAB_STUDENT_DIR set to the copy
#      and CMAKE_ARGS, builds only the student executable: the copy must compile;
#   3. `flashlab_student check STAGE --variant student --device DEVICE` must exit 1: a mismatch,
#      the TODOs are real (not a crash, 2, or 3 = cases refused);
#   4. the stage's own .c/.cu/.h files are copied over the copy, rebuilt, and the same check must
#      exit 0.
# With DEVICE cuda and no CUDA device, step 3 exits 77 and so does this script, after step 2 has
# shown that the copy compiles. The scratch tree is kept between runs, so only the copy's files,
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
echo "exercise_stage: stage $stage ($device): the copy compiles and fails; the stage itself passes"
