#!/bin/sh
# outputs_digest.sh FLASHLAB [GOLDEN_DIR] — one line per (CPU stage, variant, golden case, output
# file): the SHA-256 of what `flashlab run` writes, or the exit code when the stage does not run the
# case. Two builds write the same digest exactly when every CPU stage and variant writes bitwise
# identical outputs on every golden case: run it before and after a refactor and diff the two.
set -u
flashlab=$1
golden=${2:-$(dirname "$0")/../golden/cases}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$flashlab" list | awk '$3 == "cpu" { print $1, $4 }' | while read -r stage variant; do
    [ "$variant" = "-" ] && variant=""
    for case_dir in "$golden"/*/; do
        name=$(basename "$case_dir")
        rm -rf "$out/o"
        "$flashlab" run "$stage" "$case_dir" --out "$out/o" ${variant:+--variant "$variant"} \
            >/dev/null 2>&1
        code=$?
        if [ $code -ne 0 ]; then
            echo "$stage ${variant:--} $name exit $code"
            continue
        fi
        for f in "$out"/o/*.npy; do
            echo "$stage ${variant:--} $name $(basename "$f") $(sha256sum < "$f" | cut -c1-16)"
        done
    done
done
