#!/bin/sh
# cli_exercise.sh FLASHLAB SOURCE_DIR WORK
# `flashlab exercise` as a user meets it, without building any copy (tests/exercise.cmake builds
# them): every stage folder gives a copy with TODO blocks, a README.md and a CMakeLists.txt, and no
# temporary folder is left beside it; bad usage, an unknown stage and a non-empty folder are refused
# with exit 2 and leave nothing behind; `--variant student` without a student build says how to
# build it (exit 2).
set -u
flashlab=$1 source=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
failures=0

fail() {
    echo "cli_exercise: $*" >&2
    failures=$((failures + 1))
}

# expect RC REGEX COMMAND...: the exit status and a line of the output (stdout + stderr).
expect() {
    want=$1 regex=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    [ "$rc" -eq "$want" ] || fail "'$*' exited $rc, expected $want: $out"
    printf '%s\n' "$out" | grep -Eq -- "$regex" || fail "'$*' printed no line matching /$regex/: $out"
}

no_leftovers() {
    ls -d "$work"/*.tmp-* > /dev/null 2>&1 && fail "a temporary folder was left: $(ls -d "$work"/*.tmp-*)"
}

for dir in "$source"/stages/[0-9][0-9]_*/; do
    folder=$(basename "$dir")
    stage=$(printf '%s' "$folder" | cut -c1-2)
    copy=$work/copy_$stage
    expect 0 "TODO block" "$flashlab" exercise "$stage" "$copy"
    for f in README.md CMakeLists.txt; do
        [ -s "$copy/$f" ] || fail "stage $stage: no $f in the copy"
    done
    grep -q "flashlab_student_stage($folder" "$copy/CMakeLists.txt" || fail "stage $stage: CMakeLists.txt names no $folder"
    todos=$(cat "$copy"/*.c "$copy"/*.cu "$copy"/*.h 2>/dev/null | grep -c '// TODO(exercise ')
    [ "$todos" -gt 0 ] || fail "stage $stage: the copy has no TODO block"
    ends=$(cat "$copy"/*.c "$copy"/*.cu "$copy"/*.h 2>/dev/null | grep -c '// END TODO(exercise ')
    [ "$todos" -eq "$ends" ] || fail "stage $stage: $todos TODO lines but $ends END TODO lines"
    grep -q "exercise: begin" "$copy"/* && fail "stage $stage: a marker was left in the copy"
    echo "stage $stage: $todos TODO blocks"
done
no_leftovers

expect 2 "needs a stage and a folder" "$flashlab" exercise 07
expect 2 "no folder .*stages/99_" "$flashlab" exercise 99 "$work/unknown"
[ -e "$work/unknown" ] && fail "an unknown stage left $work/unknown"
expect 2 "not a stage number" "$flashlab" exercise seven "$work/unknown"
mkdir -p "$work/full" && echo keep > "$work/full/mine.txt"
expect 2 "exists and is not empty" "$flashlab" exercise 07 "$work/full"
[ "$(ls "$work/full")" = "mine.txt" ] || fail "a refused folder was changed: $(ls "$work/full")"
mkdir -p "$work/empty"
expect 0 "TODO block" "$flashlab" exercise 07 "$work/empty"
echo file > "$work/a_file"
expect 2 "exists and is not a folder" "$flashlab" exercise 07 "$work/a_file"
no_leftovers
expect 0 "flashlab exercise STAGE DIR" "$flashlab" exercise --help
expect 0 "flashlab exercise STAGE DIR" "$flashlab" --help

# A flashlab with no flashlab_student beside it: the request is not run, and the message says how.
mkdir -p "$work/lonely"
cp "$flashlab" "$work/lonely/flashlab"
expect 2 "student copy not built.*student_build" "$work/lonely/flashlab" check 07 --variant student
expect 2 "student copy not built" "$work/lonely/flashlab" check 07 --variant=student-naive

[ "$failures" -eq 0 ] || exit 1
echo "cli_exercise: all passed"
