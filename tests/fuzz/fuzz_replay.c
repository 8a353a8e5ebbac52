/* fuzz_replay.c — runs case folders through the structured harnesses' checks, without libFuzzer:
 *
 *   fuzz_replay [--splits N] CASE_DIR...
 *
 * Each folder is loaded with case_load (a refusal must be FL_BAD_INPUT with one printable line)
 * and, when accepted, run on the default CPU variant of its stage (attention: 10, forward and,
 * with do.npy, backward; paged: 11, with N key splits when given; MLA: 09)
 * with the outputs compared by
 * fuzz_check.h's rule. A failure prints one "SUMMARY: fuzz_replay: ..." line and aborts; exit 0
 * means every folder passed. The case folders of tests/fuzz/regressions/ are replayed this way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_support.h"

int main(int argc, char **argv)
{
    fuzz_set_name("fuzz_replay");
    FuzzRunOptions defaults = {0, 0, 0, 0};
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "--splits") == 0) {
        defaults.splits = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: fuzz_replay [--splits N] CASE_DIR...\n");
        return 2;
    }
    for (int i = first; i < argc; i++) {
        Case c;
        if (!fuzz_load(argv[i], 0, "", &c)) {
            printf("%s: refused as bad input, with one line\n", argv[i]);
            continue;
        }
        fuzz_run_case(&c, &defaults);
        case_free(&c);
        printf("%s: passed\n", argv[i]);
    }
    return 0;
}
