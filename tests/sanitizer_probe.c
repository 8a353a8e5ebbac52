/* sanitizer_probe.c — a program that does one thing a sanitizer must report, for
 * tests/sanitizer_exit.cmake:
 *   sanitizer_probe overflow   INT_MAX + 1 in a signed int (UBSan: signed-integer-overflow)
 *   sanitizer_probe leak       a malloc that is never freed (LeakSanitizer, at exit)
 * Without a report it exits 0, so the test also fails when the sanitizer did not run. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int big = INT_MAX; /* volatile: the compiler cannot fold the overflow away */
static void *volatile kept;

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "overflow") == 0) {
        int sum = big + 1;
        printf("INT_MAX + 1 = %d\n", sum);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "leak") == 0) {
        kept = malloc(100);
        kept = NULL; /* the only pointer to the block is gone */
        return 0;
    }
    fprintf(stderr, "usage: sanitizer_probe overflow|leak\n");
    return 2;
}
