#!/bin/sh
# cli_expect.sh RC REGEX COMMAND [ARGS...]
# Runs COMMAND, then fails unless its exit status is RC and its output (stdout + stderr) matches
# the extended regular expression REGEX (an empty REGEX matches anything).
set -u
want_rc=$1
regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$want_rc" ]; then
    echo "cli_expect: '$*' exited $rc, expected $want_rc" >&2
    exit 1
fi
if [ -n "$regex" ] && ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
    echo "cli_expect: output of '$*' does not match /$regex/" >&2
    exit 1
fi
exit 0
