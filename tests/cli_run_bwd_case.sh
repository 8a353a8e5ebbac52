#!/bin/sh
# cli_run_bwd_case.sh FLASHLAB COMPARE STAGE GOLDEN_CASE WORKDIR
# A user-made backward case: copies q.npy, k.npy, v.npy and do.npy of a golden case into a fresh
# folder (no expected files), runs `flashlab run STAGE folder --out out`, and compares the written
# o, lse, dq, dk and dv with the golden ones (test_cli_compare).
set -u
flashlab=$1 compare=$2 stage=$3 golden=$4 work=$5
rm -rf "$work"
mkdir -p "$work/case" || exit 1
for f in q k v do; do cp "$golden/$f.npy" "$work/case/" || exit 1; done
if [ -f "$golden/case.json" ] && grep -q scale "$golden/case.json"; then
    cp "$golden/case.json" "$work/case/"   # a case with its own scale needs it
fi
"$flashlab" run "$stage" "$work/case" --out "$work/out" || exit 1
status=0
for f in o lse dq dk dv; do
    "$compare" "$work/out/$f.npy" "$golden/$f.npy" || status=1
done
exit $status
