# IO plant of stage 05 (CPU): the FA1 habit kept inside the FA2 loop. After every K/V tile Õ_i and
# m_i go back to HBM (into O and lse), and the next tile loads them again, instead of staying in
# SRAM until the one store at the end. The round trip is bitwise exact and the final store
# overwrites both, so o and lse stay right; O is written once per K/V tile instead of once.
sed -i 's|^\(        const size_t n = min_size(Bc, Tk - j0); /\* keys in chunk j; the last one may be short \*/\)$|\1\n        if (j0 > 0) hbm_load(hbm, s->O, x.o + i0 * dv, rows * dv), hbm_load(hbm, s->m, x.lse + i0, rows);|' fa2.c
sed -i 's|^\(                    s->S, (int)n, s->V, (int)dv, 1.0f, s->O, (int)dv);\)$|\1\n        hbm_store(hbm, x.o + i0 * dv, s->O, rows * dv), hbm_store(hbm, x.lse + i0, s->m, rows);|' fa2.c
