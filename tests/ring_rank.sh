#!/bin/sh
# ring_rank.sh LAUNCHER P DIRECTION GOLDEN_DIR
# Stage 13, launch mode B: starts P processes of flashlab_ring_rank (ranks 0 .. P-1, one GPU each)
# on every case folder in GOLDEN_DIR, with one fresh NCCL id file, waits for all of them and shows
# each rank's output. Exit 77 (skipped) when this machine has fewer than P GPUs; 0 when every rank
# passed; otherwise the first failing rank's status (1: a check failed).
set -u
launcher=$1 P=$2 direction=$3 golden=$4

gpus=$("$launcher" --count-gpus) || exit 2
if [ "$gpus" -lt "$P" ]; then
    echo "ring_rank: $P processes need $P GPUs, this machine shows $gpus: skipped"
    exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/flashlab-ring-XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
set --
for case_dir in "$golden"/*/; do
    set -- "$@" "${case_dir%/}"
done

pids=""
r=0
while [ "$r" -lt "$P" ]; do
    # each rank gives up after 300 s (a lost peer must not hang the test)
    timeout 300 "$launcher" --rank "$r" --ranks "$P" --id-file "$work/nccl_id" --timeout 120 \
        --direction "$direction" "$@" > "$work/rank$r.log" 2>&1 &
    pids="$pids $!"
    r=$((r + 1))
done

status=0
r=0
for pid in $pids; do
    wait "$pid"
    rc=$?
    echo "==== rank $r (exit $rc)"
    cat "$work/rank$r.log"
    if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then
        status=$rc
    fi
    r=$((r + 1))
done
exit $status
