/* timer.c — a monotonic millisecond clock and the median of repeated measurements. */
#include "timer.h"

#include <stdlib.h>
#include <time.h>

double timer_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median_ms(double *samples, int n)
{
    if (!samples || n <= 0)
        return 0.0;
    qsort(samples, (size_t)n, sizeof *samples, compare_doubles);
    if (n % 2)
        return samples[n / 2];
    return 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}
