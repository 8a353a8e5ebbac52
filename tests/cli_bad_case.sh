#!/bin/sh
# cli_bad_case.sh FLASHLAB GOLDEN_CASE WORKDIR
# Copies a golden case, replaces k.npy with text, and checks that `flashlab check` and
# `flashlab run` both refuse it with exit 2 and a message naming k.npy, and that `run` leaves no
# output folder behind.
set -u
flashlab=$1 golden=$2 work=$3
rm -rf "$work"
mkdir -p "$work/case" || exit 1
cp "$golden"/*.npy "$work/case/" || exit 1
[ -f "$golden/case.json" ] && cp "$golden/case.json" "$work/case/"
echo "this is not a .npy file" > "$work/case/k.npy"
status=0
expect=$(dirname "$0")/cli_expect.sh
sh "$expect" 2 'k\.npy' "$flashlab" check 01 "$work/case" || status=1
sh "$expect" 2 'k\.npy' "$flashlab" run 01 "$work/case" --out "$work/out" || status=1
if [ -e "$work/out" ]; then
    echo "cli_bad_case: 'flashlab run' on a bad case created $work/out" >&2
    status=1
fi
exit $status
