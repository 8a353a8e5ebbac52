/* fuzz_magnitude.h — per output element, the size of the terms an attention output adds up
 * (fuzz_magnitude.c), which is what its float32 rounding error scales with. */
#ifndef FLASHLAB_FUZZ_MAGNITUDE_H
#define FLASHLAB_FUZZ_MAGNITUDE_H

#include "attn.h"

/* For the AttnProblem `problem` (contiguous or paged) and its concatenated float64 reference ref
 * (o, lse, then with dO: dq, dk, dv, dsinks), the magnitude of every element into mag, in the same
 * order (a FuzzMagnitude of fuzz_check.h). */
void fuzz_attention_magnitude(const void *problem, const double *ref, double *mag);

#endif
