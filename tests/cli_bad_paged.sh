#!/bin/sh
# cli_bad_paged.sh FLASHLAB GOLDEN_PAGED_CASE WORKDIR
# Bad paged decode cases (docs/conventions.md, "Paged decode cases"), each made from a copy of a
# golden paged case with a few bytes changed in place, must be refused by `flashlab check 11` and
# `flashlab run 11` with exit 2 and a message naming the file (and the entry), and `run` must leave
# no output folder. The .npy files of the golden cases are format version 1.0 with a 118-byte
# header, so the data starts at byte 128 and the descr's type letter is byte 22 ('<f4' / '<i4').
set -u
flashlab=$1 golden=$2 work=$3
expect=$(dirname "$0")/cli_expect.sh
status=0

# fresh NAME: a copy of the golden case in $work/NAME
fresh() {
    rm -rf "$work/$1"
    mkdir -p "$work/$1" && cp "$golden"/*.npy "$golden/case.json" "$work/$1/"
}
# poke FILE OFFSET OCTAL-BYTES: overwrite bytes of FILE at OFFSET
poke() {
    printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
# refused NAME REGEX: check and run both exit 2 with REGEX in the message, run writes nothing
refused() {
    sh "$expect" 2 "$2" "$flashlab" check 11 "$work/$1" || status=1
    sh "$expect" 2 "$2" "$flashlab" run 11 "$work/$1" --out "$work/$1.out" || status=1
    if [ -e "$work/$1.out" ]; then
        echo "cli_bad_paged: 'flashlab run' on $1 created $work/$1.out" >&2
        status=1
    fi
}

fresh table_range && poke "$work/table_range/block_table.npy" 128 '\377\377\377\177'
refused table_range 'block_table\.npy: entry \[0, 0\] = 2147483647 is not a page'

fresh len_short && poke "$work/len_short/seq_lens.npy" 128 '\000\000\000\000'
refused len_short 'seq_lens\.npy: entry \[0\] = 0'

fresh len_long && poke "$work/len_long/seq_lens.npy" 128 '\377\377\377\177'
refused len_long 'seq_lens\.npy: entry \[0\] = 2147483647'

fresh q_int32 && poke "$work/q_int32/q.npy" 22 'i'
refused q_int32 "q\.npy: dtype '<i4' not supported; expected little-endian float32"

fresh table_float && poke "$work/table_float/block_table.npy" 22 'f'
refused table_float "block_table\.npy: dtype '<f4' not supported; expected little-endian int32"

fresh page_size && sed 's/"page_size": [0-9]*/"page_size": 5/' "$golden/case.json" >"$work/page_size/case.json"
refused page_size 'case\.json: page_size 5, but k_pages\.npy holds pages of 4'

fresh with_dout && cp "$golden/q.npy" "$work/with_dout/do.npy"
refused with_dout 'do\.npy: paged decode cases are forward only'

exit $status
