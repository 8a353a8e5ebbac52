/* bf16.h — bfloat16 as 16-bit patterns: the top half of a float32 (1 sign, 8 exponent, 7 mantissa
 * bits). One rounding rule for the whole project (round to nearest, ties to even), used by the
 * runner to make a bf16 stage's inputs (on the host and in the device conversion kernel) and by
 * stage 12's CPU reference where its kernel rounds P and dS. Unit roundoff u = 2^-8. */
#ifndef FLASHLAB_BF16_H
#define FLASHLAB_BF16_H

#include <stdint.h>
#include <string.h>

#include "host_device.h"

FL_HD static inline uint32_t bf16_float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* float32 -> bf16, round to nearest even; a NaN stays a (quiet) NaN, infinities stay infinite. */
FL_HD static inline uint16_t bf16_from_float(float x)
{
    uint32_t u = bf16_float_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, force a mantissa bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    const uint32_t lsb = (u >> 16) & 1u; /* ties go to the even neighbour */
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

FL_HD static inline float bf16_to_float(uint16_t b)
{
    const uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to the nearest bf16 value, as a float. */
FL_HD static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

#endif
