#include "random.h"

#include <math.h>

void rng_seed(Rng *r, uint64_t seed)
{
    r->state = seed;
}

/* splitmix64: a 64-bit counter passed through a strong mixing function. */
uint64_t rng_next_u64(Rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float rng_uniform(Rng *r)
{
    /* the top 24 bits give every float in [0, 1) with spacing 2^-24 */
    return (float)(rng_next_u64(r) >> 40) * (1.0f / 16777216.0f);
}

float rng_normal(Rng *r)
{
    /* Box-Muller; u1 in (0, 1] so log(u1) is finite */
    double u1 = 1.0 - (double)(rng_next_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void rng_fill_normal(Rng *r, float *x, size_t n, float stddev)
{
    for (size_t i = 0; i < n; i++)
        x[i] = stddev * rng_normal(r);
}
