#!/bin/sh
# large_case.sh FLASHLAB PYTHON GENERATOR OUT_DIR NAME STAGE DEVICE [VARIANT]
# Writes the large golden case NAME (golden/make_golden.py --large, float64 NumPy reference; too
# big to commit) into OUT_DIR and checks STAGE on it, forward and backward. Exits 77 (skipped) when
# the device is absent or Python has no NumPy; otherwise flashlab check's status.
flashlab=$1 python=$2 generator=$3 out=$4 name=$5 stage=$6 device=$7 variant=${8:-}
if [ "$device" = cuda ]; then
  "$flashlab" bench --device cuda --stages "$stage" --T 16 --H 1 --reps 1 >/dev/null 2>&1
  [ $? -eq 77 ] && { echo "no CUDA device: skipped"; exit 77; }
fi
if ! "$python" -c "import numpy" 2>/dev/null; then
  echo "Python with NumPy not found ($python): the large case cannot be generated: skipped"
  exit 77
fi
"$python" "$generator" --large "$name" --out "$out" || exit 1
exec "$flashlab" check "$stage" "$out/$name" --device "$device" --direction bwd ${variant:+--variant "$variant"}
