/* timer.h — wall-clock timing on the CPU and the median of repeated runs. */
#ifndef FLASHLAB_TIMER_H
#define FLASHLAB_TIMER_H

#ifdef __cplusplus
extern "C" {
#endif

double timer_now_ms(void);                  /* monotonic clock, milliseconds */
double median_ms(double *samples, int n);   /* sorts samples in place */

#ifdef __cplusplus
}
#endif
#endif
