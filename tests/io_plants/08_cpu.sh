# IO plant of stage 08 (CPU): a block of packed rows never holds more rows than one query head has
# (Br <= Tq). A decode step (Tq = 1) then loads every K/V tile once per query head instead of once
# per kv head. Which rows share a block does not change any row's result.
sed -i 's|^\(    b.Br = ctx->block_r > 0 ? (size_t)ctx->block_r : max_size(1, min_size(b.Bc, (size_t)p->d));\)$|\1\n    b.Br = min_size(b.Br, (size_t)p->Tq);|' gqa.c
