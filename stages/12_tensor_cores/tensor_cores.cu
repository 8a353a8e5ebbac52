/* stages/12_tensor_cores/tensor_cores.cu — FlashAttention-2 on tensor cores, bf16 (WORK IN PROGRESS:
 * the kernels are being written; until then both passes return "not built yet"). */
#include <cuda_runtime.h>

#include "attn.h"
#include "cuda_util.h"
#include "error.h"
#include "tiles.h"

static int not_built(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    (void)p, (void)t, (void)ctx;
    return fl_fail(err, FL_UNSUPPORTED, "stage 12 (cuda): the tensor-core kernels are not built yet");
}

static const StageImpl tc_cuda = {
    "12",
    "tensor_cores",
    "",
    DEVICE_CUDA,
    "FA2 in bf16 on tensor cores: mma.sync m16n8k16, ldmatrix, swizzled shared memory, cp.async",
    FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA,
    not_built,
    not_built,
    NULL,
    NULL,
    NULL,
    PRECISION_BF16,
    {64, 128},
};

extern "C" const StageImpl *const stage12_tensor_cores_cuda[] = {&tc_cuda, NULL};
