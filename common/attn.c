/* attn.c — features of a problem, their names and the stage that adds each, and finding a stage
 * implementation in the generated registry. */
#include "attn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned attn_required_features(const AttnProblem *p)
{
    unsigned f = 0;
    if (attn_has_dout(p))
        f |= FEAT_BACKWARD;
    if (p->causal || p->window > 0)
        f |= FEAT_CAUSAL;
    if (p->Hq != p->Hkv)
        f |= FEAT_GQA;
    if (p->window > 0)
        f |= FEAT_WINDOW;
    if (p->sink_tokens > 0)
        f |= FEAT_SINK_TOKENS;
    if (p->sinks)
        f |= FEAT_SINKS;
    if (p->page_size > 0)
        f |= FEAT_PAGED;
    return f;
}

/* Rows of keys k and v hold per kv head: every page slot of the pool, or B sequences of Tk. */
static size_t kv_rows(const AttnProblem *p)
{
    return p->page_size > 0 ? (size_t)p->num_pages * p->page_size : (size_t)p->B * p->Tk;
}

AttnProblem attn_problem_bounded(const AttnProblem *p)
{
    AttnProblem out = *p;
    if (out.window > out.Tk) /* W >= Tk already keeps every key up to the row's position */
        out.window = out.Tk;
    if (out.sink_tokens > out.Tk) /* S >= Tk already keeps every key */
        out.sink_tokens = out.Tk;
    return out;
}

size_t attn_k_numel(const AttnProblem *p) { return kv_rows(p) * p->Hkv * p->d; }

size_t attn_v_numel(const AttnProblem *p) { return kv_rows(p) * p->Hkv * p->dv; }

/* One row per feature, in bit order: its name and the stage of the ladder adding it (docs/design.md). */
static const struct {
    unsigned flag;
    const char *name;
    const char *added_by;
} feature_table[FEAT_COUNT] = {
    {FEAT_BACKWARD, "backward", "06"},       {FEAT_CAUSAL, "causal", "07"},
    {FEAT_GQA, "gqa", "08"},                 {FEAT_WINDOW, "window", "10"},
    {FEAT_SINK_TOKENS, "sink_tokens", "10"}, {FEAT_SINKS, "sinks", "10"},
    {FEAT_PAGED, "paged", "11"},
};

const char *attn_feature_name(unsigned feature)
{
    for (int i = 0; i < FEAT_COUNT; i++)
        if (feature_table[i].flag == feature)
            return feature_table[i].name;
    return "unknown";
}

const char *attn_feature_added_by(unsigned feature)
{
    for (int i = 0; i < FEAT_COUNT; i++)
        if (feature_table[i].flag == feature)
            return feature_table[i].added_by;
    return "?";
}

const char *device_name(Device device)
{
    return device == DEVICE_CUDA ? "cuda" : "cpu";
}

/* Whether a user's stage name picks impl: "3", "03", "03_tiled" or "tiled". */
static int stage_matches(const StageImpl *impl, const char *stage)
{
    if (strcmp(stage, impl->name) == 0 || strcmp(stage, impl->stage) == 0)
        return 1;
    size_t len = strlen(impl->stage);
    if (strncmp(stage, impl->stage, len) == 0 && stage[len] == '_' &&
        strcmp(stage + len + 1, impl->name) == 0)
        return 1;
    char *end;
    long number = strtol(stage, &end, 10);
    return end != stage && *end == '\0' && number == strtol(impl->stage, NULL, 10);
}

const StageImpl *stage_find(const char *stage, Device device, const char *variant)
{
    if (!stage || !*stage)
        return NULL;
    if (!variant)
        variant = "";
    for (const StageImpl *const *it = stage_registry(); *it; it++) {
        const StageImpl *impl = *it;
        if (impl->device == device && strcmp(impl->variant, variant) == 0 &&
            stage_matches(impl, stage))
            return impl;
    }
    return NULL;
}

const char *stage_head_dims_text(const StageImpl *impl, const char *sep, char *buf, size_t len)
{
    const int a = impl->head_dims[0], b = impl->head_dims[1];
    if (a > 0 && b > 0 && a != b)
        snprintf(buf, len, "%d%s%d", a, sep, b);
    else if (a > 0 || b > 0)
        snprintf(buf, len, "%d", a > 0 ? a : b);
    else
        snprintf(buf, len, "%s", "");
    return buf;
}
