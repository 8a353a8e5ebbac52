#!/bin/sh
# cli_run_case.sh FLASHLAB COMPARE STAGE GOLDEN_CASE WORKDIR
# A user-made case: copies only q.npy, k.npy, v.npy of a golden case into a fresh folder (no
# case.json, no expected files), runs `flashlab run STAGE folder --out out`, and compares the
# written o.npy and lse.npy with the golden ones (test_cli_compare). No gradient file may appear,
# since the folder has no do.npy.
set -u
flashlab=$1 compare=$2 stage=$3 golden=$4 work=$5
rm -rf "$work"
mkdir -p "$work/case" || exit 1
for f in q k v; do cp "$golden/$f.npy" "$work/case/" || exit 1; done
if [ -f "$golden/case.json" ] && grep -q scale "$golden/case.json"; then
    cp "$golden/case.json" "$work/case/"   # a case with its own scale needs it
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
