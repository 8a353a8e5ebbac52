/* parallel.h — how CPU stages share the two (or more) cores.
 *
 * Stages parallelise with OpenMP over independent work (heads, query blocks) using ctx->threads.
 * BLAS calls made inside such a parallel loop must run single-threaded, or OpenBLAS's own threads
 * would fight OpenMP's: wrap the loop in blas_threads_push(1) / blas_threads_pop(). */
#ifndef FLASHLAB_PARALLEL_H
#define FLASHLAB_PARALLEL_H

#ifdef __cplusplus
extern "C" {
#endif

int default_thread_count(void);   /* cores available to this process (>= 1) */
/* Sets BLAS's thread count to n, remembering the previous value; pop restores it. Not nested. */
void blas_threads_push(int n);
void blas_threads_pop(void);

#ifdef __cplusplus
}
#endif
#endif
