/* parallel.c — thread counts for the CPU stages and BLAS's own threads (see parallel.h). */
#define _GNU_SOURCE
#include "parallel.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

int default_thread_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1)
            return n;
    }
    int n = omp_get_num_procs();
    return n >= 1 ? n : 1;
}

static int saved_blas_threads = -1; /* -1: nothing pushed */

void blas_threads_push(int n)
{
    saved_blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(n >= 1 ? n : 1);
}

void blas_threads_pop(void)
{
    if (saved_blas_threads >= 1)
        openblas_set_num_threads(saved_blas_threads);
    saved_blas_threads = -1;
}
