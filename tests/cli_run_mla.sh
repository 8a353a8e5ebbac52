#!/bin/sh
# cli_run_mla.sh FLASHLAB COMPARE VARIANT GOLDEN_MLA_CASE WORKDIR
# A user-made MLA case: copies the inputs and case.json of a golden MLA case (not y.npy) into a
# fresh folder, runs `flashlab run 09 folder --out out [--variant VARIANT]` ("-" = the default
# variant), and compares the written y.npy with the golden one (test_cli_compare). Nothing but
# y.npy may be written.
set -u
flashlab=$1 compare=$2 variant=$3 golden=$4 work=$5
rm -rf "$work"
mkdir -p "$work/case" || exit 1
for f in x ckv kpe w_dq w_uq w_qr w_uk w_uv w_o; do cp "$golden/$f.npy" "$work/case/" || exit 1; done
cp "$golden/case.json" "$work/case/" || exit 1
if [ "$variant" = - ]; then
    "$flashlab" run 09 "$work/case" --out "$work/out" || exit 1
else
    "$flashlab" run 09 "$work/case" --out "$work/out" --variant "$variant" || exit 1
fi
status=0
"$compare" "$work/out/y.npy" "$golden/y.npy" || status=1
others=$(ls "$work/out" | grep -vx y.npy)
if [ -n "$others" ]; then
    echo "cli_run_mla: unexpected files written: $others" >&2
    status=1
fi
exit $status
