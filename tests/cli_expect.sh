#!/bin/sh
# cli_expect.sh RC REGEX COMMAND [ARGS...]
# Runs COMMAND, then fails unless its exit status is RC and its output (stdout + stderr) matches
# the extended regular expression REGEX (an empty REGEX matches anything). When COMMAND exits 77
# (no CUDA device) and RC is not 77, so does this script: a test with SKIP_RETURN_CODE 77 is then
# reported skipped, and any other test fails.
set -u
want_rc=$1
regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 77 ] && [ "$want_rc" -ne 77 ]; then
    echo "cli_expect: '$*' exited 77 (no CUDA device): skipped" >&2
    exit 77
fi
if [ "$rc" -ne "$want_rc" ]; then
    echo "cli_expect: '$*' exited $rc, expected $want_rc" >&2
    exit 1
fi
if [ -n "$regex" ] && ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
    echo "cli_expect: output of '$*' does not match /$regex/" >&2
    exit 1
fi
exit 0
