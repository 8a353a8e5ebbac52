/* test_cli_compare.c — compares one .npy file written by `flashlab run` with its golden file:
 *   test_cli_compare GOT.npy WANT.npy
 * using the harness's checker at the tolerance of docs/conventions.md: the gradient tolerance when WANT is a
 * gradient (dq, dk, dv or dsinks .npy), the forward one otherwise. Exit 0 when they agree, 1 when
 * they differ, 2 when a file cannot be read. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "npy.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_cli_compare GOT.npy WANT.npy\n");
        return 2;
    }
    Tensor got = {0}, want = {0};
    FlError err;
    if (npy_read(argv[1], &got, &err) != FL_OK || npy_read(argv[2], &want, &err) != FL_OK) {
        fprintf(stderr, "test_cli_compare: %s\n", err.msg);
        tensor_free(&got);
        return 2;
    }
    const char *base = strrchr(argv[2], '/') ? strrchr(argv[2], '/') + 1 : argv[2];
    const double tol = base[0] == 'd' && strcmp(base, "do.npy") != 0 ? CHECK_TOL_BWD : CHECK_TOL_FWD;
    CheckResult r;
    int status = 0;
    if (check_tensor(&got, &want, tol, tol, &r) != 0) {
        char a[64], b[64];
        fprintf(stderr, "test_cli_compare: %s has shape %s, %s has %s\n", argv[1], tensor_shape_str(&got, a, sizeof a),
                argv[2], tensor_shape_str(&want, b, sizeof b));
        status = 1;
    } else {
        check_print(stdout, argv[1], &got, &r, 5);
        status = r.mismatches != 0;
    }
    tensor_free(&got);
    tensor_free(&want);
    return status;
}
