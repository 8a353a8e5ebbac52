/* kind.c — the table of case kinds (kind.h). A new kind is its own file and one entry here. */
#include "kind.h"

#include <string.h>

const CaseKind *const *case_kinds(void)
{
    /* The kinds with a marker file first: a folder is the first kind whose marker it holds. */
    static const CaseKind *const kinds[] = {&kind_mla, &kind_attention, NULL};
    return kinds;
}

const CaseKind *kind_of_stage(const StageImpl *impl)
{
    const CaseKind *const *kinds = case_kinds();
    for (int i = 0; kinds[i]; i++)
        if (kinds[i]->takes(impl))
            return kinds[i];
    return &kind_attention;
}

uint64_t bench_seed(int T, int d)
{
    return 20240611u + (uint64_t)T * 131u + (uint64_t)d;
}

void kind_run_free(KindRun *r)
{
    for (int i = 0; i < KIND_MAX_OUTPUTS; i++)
        tensor_free(&r->got[i]);
    memset(r, 0, sizeof *r);
}
