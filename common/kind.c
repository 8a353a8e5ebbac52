/* kind.c — the table of case kinds (kind.h). A new kind is its own file and one entry here. */
#include "kind.h"
#include "kind_mla.h"

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

const char *kind_first_stage(const CaseKind *kind)
{
    const StageImpl *const *all = stage_registry();
    for (int i = 0; all[i]; i++)
        if (kind->takes(all[i]))
            return all[i]->stage;
    return "(none in this build)";
}

const KindOption *kind_option(const char *name)
{
    const CaseKind *const *kinds = case_kinds();
    for (int i = 0; kinds[i]; i++)
        for (const KindOption *o = kinds[i]->bench_options; o && o->name; o++)
            if (!strcmp(o->name, name))
                return o;
    return NULL;
}

int bench_size(const BenchShape *s, const char *name, int fallback)
{
    for (int i = 0; i < s->nkind_sizes; i++)
        if (!strcmp(s->kind_sizes[i].name, name))
            return s->kind_sizes[i].value;
    return fallback;
}

void kind_print_help(FILE *f, const char *command)
{
    const CaseKind *const *kinds = case_kinds();
    for (int i = 0; kinds[i]; i++)
        for (const KindHelp *h = kinds[i]->help; h && h->command; h++)
            if (!strcmp(h->command, command))
                fputs(h->text, f);
}

void kind_print_bench_usage(FILE *f, const char *indent)
{
    const CaseKind *const *kinds = case_kinds();
    for (int i = 0; kinds[i]; i++) {
        if (!kinds[i]->bench_options)
            continue;
        fputs(indent, f);
        for (const KindOption *o = kinds[i]->bench_options; o->name; o++)
            fprintf(f, "[%s %s] ", o->name, o->meta);
        fprintf(f, "   (%s cases: stage %s)\n", kinds[i]->name, kind_first_stage(kinds[i]));
    }
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
