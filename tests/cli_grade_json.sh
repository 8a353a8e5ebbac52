#!/bin/sh
# cli_grade_json.sh FLASHLAB PYTHON GOLDEN WORKDIR
# `flashlab check --json` as a grader reads it: on a correct case the report says "pass" and the
# command exits 0; on a case whose expected outputs do not match what the stage computes (a causal
# golden case with its mask switched off in case.json) it says "fail", names the tensor, and exits
# 1; both reports are valid JSON (checked with PYTHON's json module).
set -u
flashlab=$1 python=$2 golden=$3 work=$4
rm -rf "$work"
mkdir -p "$work/wrong" || exit 1
cp "$golden/causal_t37_d80/"*.npy "$work/wrong/" || exit 1
echo '{"causal": false}' >"$work/wrong/case.json"
status=0
"$flashlab" check 07 "$golden/causal_t37_d80" --variant naive --json >"$work/pass.json"
[ $? -eq 0 ] || { echo "cli_grade_json: the correct case did not exit 0" >&2; status=1; }
"$flashlab" check 07 "$work/wrong" --json >"$work/fail.json"
[ $? -eq 1 ] || { echo "cli_grade_json: the mismatching case did not exit 1" >&2; status=1; }
"$python" - "$work/pass.json" "$work/fail.json" <<'PY' || status=1
import json, sys
good, bad = (json.load(open(p)) for p in sys.argv[1:3])
assert good["variant"] == "naive" and good["reference_variant"] == "", good
g = good["cases"][0]
assert g["status"] == "pass" and g["tensors"]["o.npy"]["mismatches"] == 0, g
assert g["hbm_read_bytes"] > 0 and g["reference_hbm_read_bytes"] > 0 and g["time_ms"] > 0, g
assert g["io_check"] == "off", g  # only a student copy's traffic is graded
b = bad["cases"][0]
assert b["status"] == "fail" and b["tensors"]["o.npy"]["mismatches"] > 0, b
assert bad["failed"] == 1 and bad["passed"] == 0, bad
print("cli_grade_json: pass and fail reports as expected")
PY
exit $status
