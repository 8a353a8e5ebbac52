/* random.h — a small seeded generator for benchmark inputs (not for golden cases: those come from
 * golden/make_golden.py). The same seed gives the same numbers on every machine. */
#ifndef FLASHLAB_RANDOM_H
#define FLASHLAB_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t state;
} Rng;

void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_next_u64(Rng *r);                /* splitmix64 step */
float rng_uniform(Rng *r);                    /* in [0, 1) */
float rng_normal(Rng *r);                     /* standard normal (Box-Muller) */
void rng_fill_normal(Rng *r, float *x, size_t n, float stddev); /* x[i] ~ N(0, stddev^2) */

#ifdef __cplusplus
}
#endif
#endif
