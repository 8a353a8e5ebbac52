#!/bin/sh
# cli_run_case.sh FLASHLAB COMPARE STAGE GOLDEN_CASE WORKDIR
# A user-made case: copies only the inputs of a golden case into a fresh folder (q, k, v; for a
# paged case q, k_pages, v_pages, block_table, seq_lens and sinks; no expected files, and case.json
# only when the case needs its options: its own scale, or a paged case's page size and mask), runs `flashlab run STAGE folder --out out`, and compares the
# written o.npy and lse.npy with the golden ones (test_cli_compare). No gradient file may appear,
# since the folder has no do.npy.
set -u
flashlab=$1 compare=$2 stage=$3 golden=$4 work=$5
rm -rf "$work"
mkdir -p "$work/case" || exit 1
inputs="q k v"
[ -f "$golden/k_pages.npy" ] && inputs="q k_pages v_pages block_table seq_lens"
[ -f "$golden/sinks.npy" ] && inputs="$inputs sinks"
for f in $inputs; do cp "$golden/$f.npy" "$work/case/" || exit 1; done
if [ -f "$golden/case.json" ] && grep -Eq 'scale|page_size' "$golden/case.json"; then
    cp "$golden/case.json" "$work/case/"   # its own scale, or a paged case's options
fi
"$flashlab" run "$stage" "$work/case" --out "$work/out" || exit 1
status=0
"$compare" "$work/out/o.npy" "$golden/o.npy" || status=1
"$compare" "$work/out/lse.npy" "$golden/lse.npy" || status=1
for f in dq dk dv dsinks; do
    if [ -e "$work/out/$f.npy" ]; then
        echo "cli_run_case: $f.npy written although the case has no do.npy" >&2
        status=1
    fi
done
exit $status
