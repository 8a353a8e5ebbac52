/* cuda_runner_none.c — the device side of the runner in a build without CUDA: there is no device,
 * so every CUDA request answers FL_NO_DEVICE (exit code 77, CTest's "skipped"). */
#include "runner.h"

static int no_cuda(const StageImpl *impl, FlError *err)
{
    return fl_fail(err, FL_NO_DEVICE, "stage %s (%s): this build of flashlab has no CUDA support "
                   "(configure with nvcc available to build the CUDA stages)", impl->stage, impl->name);
}

int cuda_device_available(void)
{
    return 0;
}

const char *cuda_device_description(void)
{
    return "none (built without CUDA)";
}

int cuda_runner_run(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
                    const RunnerArrays *arrays, const RunCtx *opts, RunStats *stats, FlError *err)
{
    (void)dir, (void)p, (void)t, (void)arrays, (void)opts, (void)stats;
    return no_cuda(impl, err);
}

int cuda_runner_time(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *opts,
                     const Timing *timing, double *median, FlError *err)
{
    (void)dir, (void)p, (void)opts, (void)timing, (void)median;
    return no_cuda(impl, err);
}

int cuda_runner_run_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, RunStats *stats,
                         FlError *err)
{
    (void)s, (void)opts, (void)stats;
    return no_cuda(impl, err);
}

int cuda_runner_time_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, const Timing *timing,
                          double *median, FlError *err)
{
    (void)s, (void)opts, (void)timing, (void)median;
    return no_cuda(impl, err);
}
