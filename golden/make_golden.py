#!/usr/bin/env python3
"""make_golden.py -- the reference (oracle) for every flashlab stage.

Writes the golden case folders (docs/design.md#case-folders, golden/README.md):

    python golden/make_golden.py [--out DIR]     # default: golden/cases next to this file
    python golden/make_golden.py --selftest      # gradients vs finite differences, loop checks
    python golden/make_golden.py --list          # markdown table of the cases (for README.md)
    python golden/make_golden.py --seed N --out DIR   # hidden cases for grading (see below)

Each attention case folder holds case.json, the inputs q/k/v.npy (+ do.npy, sinks.npy) and the
expected outputs o/lse.npy (+ dq/dk/dv.npy with do.npy, + dsinks.npy with sinks.npy).

The MLA cases of stage 09 (names mla_*) hold case.json, the inputs x, ckv, kpe and the six weight
matrices w_dq, w_uq, w_qr, w_uk, w_uv, w_o (.npy), and the expected output y.npy (see
`mla_reference`).

The paged decode cases of stage 11 (names paged_*, and tc_paged_* with bf16-exact inputs for
stage 16; recognised by k_pages.npy) hold case.json (with `page_size`), q.npy, the page pools
k_pages.npy and v_pages.npy (NaN in every slot no sequence uses), the int32 block_table.npy and
seq_lens.npy, optional sinks.npy, and the expected o.npy and lse.npy (see `paged_reference`: each
sequence is gathered from its pages and run through `attention_forward`).

How the numbers are made:
  * every case has its own fixed seed; inputs are drawn with numpy's default_rng, rounded to
    float32 (that is what the stages read), and the reference then runs in float64 on exactly
    those float32 values;
  * outputs are stored as little-endian float32 in C order.

Hidden cases for grading: `--seed N --out DIR` (N a non-negative integer) writes the very same
case list -- every attention, MLA and paged case, same names, shapes, options and case.json (and
for paged cases the same seq_lens and pool size; the page order is drawn too) -- with inputs drawn
from another seed: each case's generator is seeded with
numpy.random.SeedSequence([N, the case's own fixed seed]), so the same N rewrites the same folder
byte for byte and another N gives other inputs. The seed goes into the summary line only, never
into the case folders. `--seed` needs an --out that is not golden/cases (the committed cases are
never rewritten from a hidden seed); without --seed nothing changes.

The conventions (docs/conventions.md) live in one function, `keep_mask`; everything else is the
plain softmax-attention math on top of it (MLA adds `rope`). NumPy only.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
try:  # re-runs this script under a python3 that has NumPy (tools/need_modules.py)
    from need_modules import need
    need("numpy")
except ImportError:  # a copy of the script outside the repository: plain imports below
    pass
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "cases")


# ---------------------------------------------------------------------------------------------
# The conventions
# ---------------------------------------------------------------------------------------------

def keep_mask(Tq, Tk, causal=False, window=0, sink_tokens=0):
    """Boolean (Tq, Tk): which keys j each query row i sees.

    Query row i sits at position i' = i + Tk - Tq (bottom-right alignment).
      causal           keep j <= i'
      window W > 0     implies causal; keep i' - W < j <= i'   (W keys, the row's own included)
      sink_tokens S>0  additionally keep j < S, still only j <= i'
    """
    i_pos = np.arange(Tq)[:, None] + (Tk - Tq)   # i'  (Tq, 1)
    j = np.arange(Tk)[None, :]                   # j   (1, Tk)
    keep = np.ones((Tq, Tk), dtype=bool)
    if causal or window > 0:
        keep &= j <= i_pos
    if window > 0:
        keep &= j > i_pos - window
    if sink_tokens > 0:
        keep |= (j < sink_tokens) & (j <= i_pos)
    return keep


def expand_kv(x, Hq):
    """(B, Hkv, Tk, .) -> (B, Hq, Tk, .): query head h reads kv head h // (Hq // Hkv)."""
    Hkv = x.shape[1]
    assert Hq % Hkv == 0, "Hq must be a multiple of Hkv"
    return np.repeat(x, Hq // Hkv, axis=1)


def reduce_kv(x, Hkv):
    """(B, Hq, Tk, .) -> (B, Hkv, Tk, .): sum the gradients of the query heads of one group."""
    B, Hq, Tk, n = x.shape
    return x.reshape(B, Hkv, Hq // Hkv, Tk, n).sum(axis=2)


def masked_scores(q, k, scale, causal=False, window=0, sink_tokens=0):
    """S = Q K^T * scale  (B, Hq, Tq, Tk), float64, with -inf where the mask drops a key.
    Also returns the mask (Tq, Tk)."""
    Tq, Tk = q.shape[2], k.shape[2]
    kx = expand_kv(k, q.shape[1])
    S = np.einsum("bhid,bhjd->bhij", q, kx) * scale
    keep = keep_mask(Tq, Tk, causal, window, sink_tokens)
    return np.where(keep, S, -np.inf), keep


# ---------------------------------------------------------------------------------------------
# Forward and backward in float64
# ---------------------------------------------------------------------------------------------

def attention_forward(q, k, v, scale, causal=False, window=0, sink_tokens=0, sinks=None):
    """Returns o (B,Hq,Tq,dv), lse (B,Hq,Tq), P (B,Hq,Tq,Tk), P_sink (B,Hq,Tq) or None.

    lse = log(sum_j exp(S_ij) [+ exp(sink_h)]), so P = exp(S - lse) and P_sink = exp(sink - lse).
    A row that sees no key has o = 0 and lse = -inf (or lse = sink_h with sinks, P_sink = 1)."""
    S, keep = masked_scores(q, k, scale, causal, window, sink_tokens)
    B, Hq, Tq, Tk = S.shape
    sink = None
    if sinks is not None:
        sink = np.broadcast_to(sinks.reshape(1, Hq, 1), (B, Hq, Tq))
    m = S.max(axis=-1) if Tk > 0 else np.full((B, Hq, Tq), -np.inf)   # row max (B,Hq,Tq)
    if sink is not None:
        m = np.maximum(m, sink)
    m_safe = np.where(np.isfinite(m), m, 0.0)          # empty rows: any finite shift will do
    E = np.where(keep, np.exp(np.where(keep, S, 0.0) - m_safe[..., None]), 0.0)
    ell = E.sum(axis=-1)                               # denominator / exp(m)
    if sink is not None:
        ell = ell + np.exp(sink - m_safe)
    seen = ell > 0
    ell_safe = np.where(seen, ell, 1.0)
    lse = np.where(seen, m_safe + np.log(ell_safe), -np.inf)
    P = E / ell_safe[..., None]                        # rows with no key stay 0
    P_sink = None if sink is None else np.exp(sink - m_safe) / ell_safe
    o = np.einsum("bhij,bhjd->bhid", P, expand_kv(v, Hq))
    return o, lse, P, P_sink


def attention_backward(q, k, v, o, P, P_sink, do, scale):
    """Gradients of sum(o * do).  D = rowsum(dO o O);  dS = P o (dP - D).
    Returns dq, dk, dv, dsinks (None without sinks)."""
    Hq, Hkv = q.shape[1], k.shape[1]
    kx, vx = expand_kv(k, Hq), expand_kv(v, Hq)
    dP = np.einsum("bhid,bhjd->bhij", do, vx)          # dP = dO V^T       (B,Hq,Tq,Tk)
    D = np.sum(do * o, axis=-1)                        # D = rowsum(dO o O) (B,Hq,Tq)
    dS = P * (dP - D[..., None])                       # dS = P o (dP - D)
    dq = scale * np.einsum("bhij,bhjd->bhid", dS, kx)  # dQ = scale dS K
    dk = reduce_kv(scale * np.einsum("bhij,bhid->bhjd", dS, q), Hkv)   # dK = scale dS^T Q
    dv = reduce_kv(np.einsum("bhij,bhid->bhjd", P, do), Hkv)           # dV = P^T dO
    dsinks = None
    if P_sink is not None:
        # the sink's value vector is zero, so its dP is 0 and dS_sink = P_sink (0 - D)
        dsinks = -np.sum(P_sink * D, axis=(0, 2))
    return dq, dk, dv, dsinks


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------

def case(name, seed, B=1, Hq=2, Hkv=None, Tq=16, Tk=None, d=32, dv=None, causal=False, window=0,
         sink_tokens=0, sinks=False, bwd=True, scale=None, bf16=False, description=""):
    """One attention case. bf16=True draws inputs that bf16 holds exactly (see draw_inputs)."""
    return dict(name=name, seed=seed, B=B, Hq=Hq, Hkv=Hq if Hkv is None else Hkv, Tq=Tq,
                Tk=Tq if Tk is None else Tk, d=d, dv=d if dv is None else dv,
                causal=bool(causal or window > 0), window=window, sink_tokens=sink_tokens,
                sinks=sinks, bwd=bwd, scale=scale, bf16=bf16, description=description)


CASES = [
    # --- plain attention (stages 01-05: no mask, Hq == Hkv) ---------------------------------
    case("plain_t1", 101, B=1, Hq=2, Tq=1, d=32,
         description="plain MHA, a single query and key"),
    case("plain_t37_d24", 102, B=2, Hq=2, Tq=37, d=24, bwd=False,
         description="plain MHA, odd T=37, d=24, B=2, forward only"),
    case("plain_t37_d80_bwd", 103, B=1, Hq=1, Tq=37, d=80,
         description="plain attention, a single head, T=37, d=80"),
    case("plain_tq_gt_tk", 104, B=1, Hq=2, Tq=48, Tk=19, d=16,
         description="plain MHA, more queries than keys (Tq=48 > Tk=19)"),
    case("plain_tq_lt_tk", 105, B=1, Hq=2, Tq=13, Tk=70, d=32, bwd=False,
         description="plain MHA, fewer queries than keys (Tq=13 < Tk=70), forward only"),
    case("plain_decode_tq1", 106, B=2, Hq=2, Tq=1, Tk=53, d=24,
         description="plain MHA, one query over 53 keys (decode shape)"),
    case("plain_b3_t24", 107, B=3, Hq=2, Tq=24, d=16,
         description="plain MHA, B=3, T=24"),
    case("plain_scale", 108, B=1, Hq=2, Tq=20, d=16, scale=0.5,
         description="plain MHA with an explicit scale 0.5 (default would be 1/sqrt(16))"),
    case("plain_d24_dv40", 109, B=2, Hq=2, Tq=29, Tk=45, d=24, dv=40, bwd=False,
         description="plain MHA, d=24 != dv=40, forward only"),
    case("plain_d80_dv24", 110, B=1, Hq=3, Tq=17, d=80, dv=24, bwd=False,
         description="plain MHA, d=80 != dv=24, forward only"),
    case("plain_d40_dv24_bwd", 111, B=1, Hq=2, Tq=21, Tk=33, d=40, dv=24,
         description="plain MHA, d=40 != dv=24, with backward"),
    # --- causal (stage 07) --------------------------------------------------------------------
    case("causal_t1", 201, B=2, Hq=2, Tq=1, d=24, causal=True,
         description="causal, T=1"),
    case("causal_t37_d80", 202, B=1, Hq=1, Tq=37, d=80, causal=True,
         description="causal, a single head, T=37, d=80"),
    case("causal_b2_t48_fwd", 203, B=2, Hq=2, Tq=48, d=16, causal=True, bwd=False,
         description="causal, B=2, T=48, forward only"),
    case("causal_tq_gt_tk", 204, B=1, Hq=2, Tq=40, Tk=23, d=16, causal=True,
         description="causal, Tq=40 > Tk=23: the first 17 rows see no key (o=0, lse=-inf)"),
    case("causal_tq_lt_tk", 205, B=1, Hq=2, Tq=19, Tk=61, d=24, causal=True,
         description="causal, Tq=19 < Tk=61: bottom-right aligned, row 0 sees keys 0..42"),
    case("causal_d24_dv40_fwd", 206, B=1, Hq=2, Tq=33, d=24, dv=40, causal=True, bwd=False,
         description="causal, d=24 != dv=40, forward only"),
    # --- GQA / MQA (stage 08) ------------------------------------------------------------------
    case("gqa3_t37_d24", 301, B=1, Hq=6, Hkv=2, Tq=37, d=24,
         description="GQA Hq/Hkv=3, T=37, d=24, non-causal"),
    case("mqa_t40", 302, B=1, Hq=4, Hkv=1, Tq=40, d=24,
         description="MQA (Hkv=1), T=40, non-causal"),
    case("gqa3_causal_tq_gt_tk", 303, B=1, Hq=6, Hkv=2, Tq=30, Tk=21, d=16, causal=True,
         description="GQA 3, causal, Tq=30 > Tk=21 (9 rows see no key)"),
    case("gqa2_causal_decode", 304, B=2, Hq=4, Hkv=2, Tq=1, Tk=45, d=24, causal=True,
         description="GQA 2, causal, one query over 45 keys"),
    case("mqa3_causal_tq_lt_tk", 305, B=1, Hq=3, Hkv=1, Tq=23, Tk=48, d=24, causal=True,
         description="MQA with 3 query heads, causal, Tq=23 < Tk=48"),
    case("gqa3_d24_dv40_fwd", 306, B=1, Hq=6, Hkv=2, Tq=27, d=24, dv=40, causal=True, bwd=False,
         description="GQA 3, causal, d=24 != dv=40, forward only"),
    case("gqa8_causal_t33", 307, B=1, Hq=16, Hkv=2, Tq=33, d=32, causal=True,
         description="GQA 8 (Hq=16, Hkv=2), causal, T=33"),
    case("gqa4_causal_tq3_tk40", 308, B=2, Hq=8, Hkv=2, Tq=3, Tk=40, d=16, causal=True,
         description="GQA 4, causal, Tq=3 queries over Tk=40 keys (a few-token decode step)"),
    # --- sliding window, sink tokens, learned sinks (stage 10) ---------------------------------
    case("window_gt_t", 401, B=1, Hq=2, Tq=37, d=16, window=100,
         description="window W=100 larger than T=37 (same as causal)"),
    case("window8_t37_d24", 402, B=1, Hq=2, Tq=37, d=24, window=8,
         description="window W=8, T=37, d=24"),
    case("window1_t17", 403, B=1, Hq=2, Tq=17, d=32, window=1,
         description="window W=1: each row sees only its own position"),
    case("window_tq_gt_tk", 404, B=1, Hq=2, Tq=30, Tk=20, d=32, window=5,
         description="window W=5, Tq=30 > Tk=20: the first 10 rows see no key"),
    case("window_tq_lt_tk", 405, B=1, Hq=2, Tq=12, Tk=60, d=16, window=16,
         description="window W=16, Tq=12 < Tk=60"),
    case("window_sink_tokens", 406, B=1, Hq=2, Tq=45, d=16, window=6, sink_tokens=4,
         description="window W=6 plus sink_tokens S=4"),
    case("sink_tokens_ge_t", 407, B=1, Hq=2, Tq=37, d=24, window=4, sink_tokens=50,
         description="window W=4 with sink_tokens S=50 >= T=37 (same as causal)"),
    case("sinks_plain", 408, B=1, Hq=3, Tq=33, d=16, sinks=True,
         description="learned sink logits, non-causal"),
    case("sinks_causal_tq_gt_tk", 409, B=1, Hq=2, Tq=24, Tk=10, d=32, causal=True, sinks=True,
         description="learned sinks, causal, Tq=24 > Tk=10: rows that see no key give o=0, "
                     "lse=sink"),
    case("window_sinks", 410, B=1, Hq=2, Tq=40, d=16, window=7, sinks=True,
         description="window W=7 with learned sinks"),
    case("window_sinks_t1", 411, B=1, Hq=2, Tq=1, d=24, window=3, sink_tokens=1, sinks=True,
         description="T=1 with window, sink token and learned sinks"),
    case("gqa3_window_sinks_bwd", 412, B=1, Hq=6, Hkv=2, Tq=45, d=24, window=9, sink_tokens=3,
         sinks=True, description="GQA 3 + window W=9 + sink_tokens S=3 + learned sinks"),
    case("mqa_window_sinks_tq_gt_tk", 413, B=1, Hq=3, Hkv=1, Tq=30, Tk=22, d=80, window=5,
         sink_tokens=2, sinks=True,
         description="MQA + window W=5 + S=2 + learned sinks, d=80, Tq=30 > Tk=22 (8 rows see no key)"),
    case("gqa2_window_sinks_tq_lt_tk", 414, B=1, Hq=4, Hkv=2, Tq=17, Tk=75, d=16, window=20,
         sink_tokens=4, sinks=True,
         description="GQA 2 + window W=20 + S=4 + learned sinks, Tq=17 < Tk=75"),
    case("gqa3_window_sinks_d24_dv40_fwd", 415, B=1, Hq=3, Hkv=1, Tq=31, d=24, dv=40, window=10,
         sink_tokens=2, sinks=True, bwd=False,
         description="MQA + window + sink tokens + learned sinks, d=24 != dv=40, forward only"),
    case("window_sinks_t512", 416, B=1, Hq=2, Hkv=1, Tq=512, d=32, window=16, sink_tokens=4,
         sinks=True,
         description="GQA 2 + window W=16 + S=4 + learned sinks over T=512: several key tiles, so a "
                     "stage that walks only the sink tiles and the band reads less (stage 10's IO check)"),
    # --- bf16 on tensor cores (stage 12): head dims d = dv in {64, 128} ------------------------
    # Stage 12 runs only these head dims, so it needs cases of its own; the float32 stages run
    # them too. Tiles of the stage-12 kernels: 128 query rows forward, 64 backward, 64 keys.
    case("tc_t1000_d64_causal", 1201, B=1, Hq=1, Tq=1000, d=64, causal=True,
         description="tensor cores: causal, T=1000 (16 key tiles, the last one short), d=64"),
    case("tc_gqa2_t37_d64", 1202, B=1, Hq=4, Hkv=2, Tq=37, d=64,
         description="tensor cores: GQA 2 (Hq=4, Hkv=2), T=37 (one short tile), d=64, non-causal"),
    case("tc_t37_d128_causal", 1203, B=1, Hq=1, Tq=37, d=128, causal=True,
         description="tensor cores: causal, T=37, d=128"),
    case("tc_mqa4_d128_causal_tq19_tk77", 1204, B=1, Hq=4, Hkv=1, Tq=19, Tk=77, d=128, causal=True,
         description="tensor cores: MQA with 4 query heads, causal, Tq=19 < Tk=77 (two key tiles), "
                     "d=128"),
    case("tc_mqa2_d64_causal_tq150_tk20", 1205, B=1, Hq=2, Hkv=1, Tq=150, Tk=20, d=64, causal=True,
         description="tensor cores: MQA with 2 query heads, causal, Tq=150 > Tk=20: the first 130 "
                     "rows of each head see no key (a whole forward block of 128 rows and two "
                     "backward tiles of 64)"),
    case("tc_d128_tq45_tk21_fwd", 1206, B=1, Hq=1, Tq=45, Tk=21, d=128, bwd=False,
         description="tensor cores: non-causal, Tq=45 > Tk=21, d=128, forward only"),
    case("tc_gqa2_b2_t1_d128_causal", 1207, B=2, Hq=4, Hkv=2, Tq=1, d=128, causal=True,
         description="tensor cores: GQA 2, B=2, causal, T=1, d=128"),
    case("tc_mqa2_t400_d128_causal", 1208, B=1, Hq=2, Hkv=1, Tq=400, d=128, causal=True, bf16=True,
         description="tensor cores: causal, T=400, d=128, MQA with 2 query heads: several 128-key "
                     "tiles per query tile at d=128 (stage 14's forward blocks walk 4, 3, 2 and 1 "
                     "of them, so a block that takes them all starts its ring of 3 stages at 0, "
                     "1, 1 and 0)"),
    case("tc_mqa2_tq300_tk400_d128", 1209, B=1, Hq=2, Hkv=1, Tq=300, Tk=400, d=128, bf16=True,
         description="tensor cores: non-causal, d=128, MQA with 2 query heads, Tq=300 < Tk=400: "
                     "four 128-key tiles (the last holds 16 keys) for each of stage 14's three "
                     "forward blocks (the first short), so a block that takes them all starts its "
                     "ring of 3 stages at 0, 1 and 2"),
    # --- bf16 window + sink tokens + learned sinks (stage 15): d = dv in {64, 128} --------------
    # Inputs that bf16 holds exactly (bf16=True), so rounding them to bf16 changes nothing and the
    # float64 reference is the exact answer to what a bf16 stage reads. Tiles of the stage-15
    # kernels (stage 12's): 128 query rows forward, 64 backward, 64 keys.
    case("tc_gptoss_g8_t160_w48_sinks", 1501, B=1, Hq=8, Hkv=1, Tq=160, d=64, window=48,
         sinks=True, bf16=True,
         description="tensor cores, gpt-oss-like: a group of 8 query heads per kv head (Hq=8, Hkv=1), d=64, causal sliding "
                     "window W=48, learned sinks, T=160 (the second forward block skips key tile 0, "
                     "the backward's key tile 0 skips the third query tile)"),
    case("tc_mqa2_t257_w40_s4_sinks", 1502, B=1, Hq=2, Hkv=1, Tq=257, d=64, window=40,
         sink_tokens=4, sinks=True, bf16=True,
         description="tensor cores: MQA with 2 query heads, odd T=257, window W=40 + sink_tokens S=4 + learned "
                     "sinks: the last forward block walks the sink tile, then jumps to the band"),
    case("tc_mqa2_window_sinks_tq150_tk40", 1503, B=1, Hq=2, Hkv=1, Tq=150, Tk=40, d=64,
         window=16, sink_tokens=2, sinks=True, bf16=True,
         description="tensor cores: MQA with 2 query heads, W=16, S=2, learned sinks, Tq=150 > "
                     "Tk=40: the first 110 rows of each head see no key (o=0, lse=sink)"),
    case("tc_window_sinks_d128_tq50_tk200", 1504, B=1, Hq=2, Hkv=1, Tq=50, Tk=200, d=128,
         window=16, sink_tokens=3, sinks=True, bf16=True,
         description="tensor cores: d=128, W=16, S=3, learned sinks, Tq=50 < Tk=200: no row sees "
                     "key tile 64..127 (the backward loads it not at all, dK = dV = 0)"),
    case("tc_window_sinks_b2_t1", 1505, B=2, Hq=2, Hkv=1, Tq=1, d=64, window=3, sink_tokens=1,
         sinks=True, bf16=True,
         description="tensor cores: T=1 with a window, a sink token and learned sinks, B=2, MQA"),
    case("tc_gqa2_window_gt_t_sinks", 1506, B=1, Hq=4, Hkv=2, Tq=70, d=64, window=100,
         sinks=True, bf16=True,
         description="tensor cores: window W=100 wider than T=70 (the causal mask) with learned "
                     "sinks, GQA 2 (Hq=4, Hkv=2)"),
    case("tc_window1_sink_tokens_t100", 1507, B=1, Hq=1, Tq=100, d=64, window=1, sink_tokens=2,
         bf16=True,
         description="tensor cores: window W=1 with sink_tokens S=2, no learned sinks: each row "
                     "sees itself and the first two keys"),
    # --- the tour case (flashlab tour) ----------------------------------------------------------
    case("tour", 1, B=1, Hq=4, Tq=512, d=64,
         description="the tour: plain MHA, B=1, H=4, T=512, d=64, with dO"),
]


# Cases too large to commit (tens of MB): written on demand with `--large NAME --out DIR`, by the
# tests that use them (tests/large_cases.cmake), into the build folder.
LARGE_CASES = [
    case("gptoss_t1024", 1001, B=1, Hq=64, Hkv=8, Tq=1024, d=64, window=128, sinks=True,
         description="gpt-oss-like layer: Hq=64, Hkv=8, d=64, causal sliding window W=128, learned "
                     "sinks, T=1024, B=1"),
]


def bf16_round(x):
    """float32 -> the nearest bfloat16 (ties to even), kept as float32: the top 16 bits of each
    float32, rounded as common/bf16.h rounds (finite inputs only)."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype("<u4").view("<f4")


def draw_inputs(c):
    """Inputs for one case, float32: q, k, v ~ N(0,1) (so scores ~ N(0,1) after the default
    scale), dO ~ N(0,1), sink logits ~ U(-1, 2). A case with bf16=True rounds every input to bf16
    (8 significant bits), so that a bf16 stage reads exactly the numbers the reference uses."""
    rng = np.random.default_rng(c["seed"])

    def f32(shape, draw):
        x = np.ascontiguousarray(draw(shape), dtype="<f4")
        return bf16_round(x) if c.get("bf16") else x

    inputs = {
        "q": f32((c["B"], c["Hq"], c["Tq"], c["d"]), rng.standard_normal),
        "k": f32((c["B"], c["Hkv"], c["Tk"], c["d"]), rng.standard_normal),
        "v": f32((c["B"], c["Hkv"], c["Tk"], c["dv"]), rng.standard_normal),
    }
    if c["bwd"]:
        inputs["do"] = f32((c["B"], c["Hq"], c["Tq"], c["dv"]), rng.standard_normal)
    if c["sinks"]:
        inputs["sinks"] = f32((c["Hq"],), lambda s: rng.uniform(-1.0, 2.0, size=s))
    return inputs


def reference_outputs(c, inputs):
    """Expected outputs (float64) for the float32 inputs of one case."""
    x = {name: a.astype(np.float64) for name, a in inputs.items()}
    scale = c["scale"] if c["scale"] is not None else 1.0 / math.sqrt(c["d"])
    o, lse, P, P_sink = attention_forward(x["q"], x["k"], x["v"], scale, c["causal"],
                                          c["window"], c["sink_tokens"], x.get("sinks"))
    out = {"o": o, "lse": lse}
    if "do" in x:
        dq, dk, dv, dsinks = attention_backward(x["q"], x["k"], x["v"], o, P, P_sink, x["do"],
                                                scale)
        out.update(dq=dq, dk=dk, dv=dv)
        if dsinks is not None:
            out["dsinks"] = dsinks
    return out


def case_json(c):
    obj = {"description": c["description"], "causal": c["causal"], "window": c["window"],
           "sink_tokens": c["sink_tokens"]}
    if c["scale"] is not None:
        obj["scale"] = c["scale"]
    return obj


# ---------------------------------------------------------------------------------------------
# MLA (stage 09): multi-head latent attention with a decoupled RoPE part, float64
# ---------------------------------------------------------------------------------------------

def rope(x, pos, theta):
    """Rotary embedding, interleaved pairs: x (..., T, p) with p even, pos (T,) the positions.

    Pair t < p/2 is (x[2t], x[2t+1]) and turns by the angle a = pos * theta**(-2t/p):
        (x0, x1) -> (x0 cos a - x1 sin a,  x0 sin a + x1 cos a)"""
    p = x.shape[-1]
    assert p % 2 == 0, "the RoPE width p must be even"
    freq = theta ** (-np.arange(0, p, 2, dtype=np.float64) / p)     # theta^(-2t/p)  (p/2,)
    angle = np.asarray(pos, dtype=np.float64)[:, None] * freq[None, :]  # (T, p/2)
    cos, sin = np.cos(angle), np.sin(angle)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def mla_softmax(S, causal):
    """Row softmax over the keys of S (B, H, Tq, Tk), with the bottom-right causal mask of
    `keep_mask` when causal. With Tq <= Tk every row keeps at least key 0."""
    Tq, Tk = S.shape[-2:]
    keep = keep_mask(Tq, Tk, causal)
    assert keep.any(axis=1).all(), "an MLA row sees no key (Tq > Tk?)"
    S = np.where(keep, S, -np.inf)
    E = np.exp(S - S.max(axis=-1, keepdims=True))      # masked keys: exp(-inf) = 0
    return E / E.sum(axis=-1, keepdims=True)


def mla_reference(x, ckv, kpe, w_dq, w_uq, w_qr, w_uk, w_uv, w_o, causal=True,
                  rope_theta=10000.0):
    """MLA forward, the naive way (every head's keys and values expanded from the latent cache).

    x (B, Tq, D), ckv (B, Tk, m), kpe (B, Tk, p) (already rotated, shared by the heads),
    w_dq (D, mq), w_uq (mq, H, dh), w_qr (mq, H, p), w_uk (m, H, dh), w_uv (m, H, dv),
    w_o (H, dv, D). For batch b, head h, query row i, key j:
        c_q[b,i]      = x[b,i] W_dq                      (no normalisation)
        q_nope[b,h,i] = c_q[b,i] W_uq[:, h]              q_pe[b,h,i] = rope(c_q[b,i] W_qr[:, h])
                                                         at position Tk - Tq + i
        k_nope[b,h,j] = ckv[b,j] W_uk[:, h]              v[b,h,j] = ckv[b,j] W_uv[:, h]
        s[b,h,i,j]    = (q_nope . k_nope + q_pe . kpe[b,j]) / sqrt(dh + p)
        P = softmax_j(s) (bottom-right causal mask when causal);  o[b,h,i] = sum_j P v[b,h,j]
        y[b,i]        = sum_h o[b,h,i] W_o[h]
    Returns y (B, Tq, D)."""
    Tq, Tk = x.shape[1], ckv.shape[1]
    dh, p = w_uk.shape[2], kpe.shape[2]
    c_q = x @ w_dq                                              # (B, Tq, mq)
    q_nope = np.einsum("bic,chd->bhid", c_q, w_uq)              # (B, H, Tq, dh)
    q_pe = rope(np.einsum("bic,chr->bhir", c_q, w_qr), np.arange(Tq) + (Tk - Tq), rope_theta)
    k_nope = np.einsum("bjc,chd->bhjd", ckv, w_uk)              # (B, H, Tk, dh)
    v = np.einsum("bjc,chd->bhjd", ckv, w_uv)                   # (B, H, Tk, dv)
    S = (np.einsum("bhid,bhjd->bhij", q_nope, k_nope) +
         np.einsum("bhir,bjr->bhij", q_pe, kpe)) / math.sqrt(dh + p)
    o = np.einsum("bhij,bhjd->bhid", mla_softmax(S, causal), v)  # (B, H, Tq, dv)
    return np.einsum("bhid,hdn->bin", o, w_o)


def mla_case(name, seed, B, Tq, Tk, D, mq, H, dh, m, p, dv, causal=True, rope_theta=10000.0,
             bf16=False, description=""):
    """One MLA case. bf16=True draws inputs that bf16 holds exactly (see mla_draw_inputs)."""
    assert min(B, Tq, Tk, D, mq, H, dh, m, p, dv) >= 1 and p % 2 == 0 and Tq <= Tk
    return dict(name=name, seed=seed, B=B, Tq=Tq, Tk=Tk, D=D, mq=mq, H=H, dh=dh, m=m, p=p, dv=dv,
                causal=bool(causal), rope_theta=float(rope_theta), bf16=bool(bf16),
                description=description)


MLA_CASES = [
    mla_case("mla_decode_tq1", 901, B=2, Tq=1, Tk=37, D=48, mq=24, H=4, dh=16, m=32, p=8, dv=16,
             description="MLA decode: one new token over a latent cache of 37, B=2"),
    mla_case("mla_decode_tq2", 902, B=1, Tq=2, Tk=40, D=32, mq=16, H=8, dh=8, m=24, p=4, dv=12,
             description="MLA decode of 2 tokens (causal between them), 8 heads, dh=8 != dv=12"),
    mla_case("mla_decode_tq4", 903, B=2, Tq=4, Tk=33, D=40, mq=20, H=3, dh=12, m=20, p=6, dv=8,
             rope_theta=500.0,
             description="MLA decode of 4 tokens with rope_theta=500 (catches a hard-coded theta), "
                         "p=6"),
    mla_case("mla_prefill_t24", 904, B=1, Tq=24, Tk=24, D=32, mq=16, H=4, dh=16, m=32, p=8, dv=16,
             description="MLA prefill: Tq=Tk=24, causal, RoPE positions 0..23"),
    mla_case("mla_odd_sizes", 905, B=3, Tq=5, Tk=29, D=21, mq=11, H=5, dh=7, m=19, p=2, dv=9,
             description="MLA with odd D, mq, H, dh, m, dv, Tq, Tk, the smallest RoPE width p=2, "
                         "B=3"),
    mla_case("mla_noncausal_tq_lt_tk", 906, B=2, Tq=6, Tk=17, D=24, mq=12, H=2, dh=8, m=16, p=4,
             dv=24, causal=False,
             description="MLA without a mask, Tq=6 < Tk=17 (RoPE positions still start at Tk-Tq), "
                         "dv=24 > dh=8"),
    mla_case("mla_wide", 907, B=1, Tq=2, Tk=20, D=16, mq=16, H=2, dh=16, m=160, p=16, dv=16,
             description="MLA with a wide latent m=160: absorbed key width m+p=176 and value width "
                         "160, both over 128"),
    # --- MLA in bf16 (stage 17): inputs that bf16 holds exactly, so the float64 reference is the
    # exact answer to what a bf16 stage reads. The cache is walked in tiles of 64 keys (stage 17's
    # tiles.h); the first case has DeepSeek-V2's latent widths.
    mla_case("tc_mla_decode_m512_p64", 911, B=2, Tq=1, Tk=200, D=64, mq=32, H=16, dh=16, m=512,
             p=64, dv=16, bf16=True,
             description="bf16 MLA decode with DeepSeek-V2's cache widths m=512, p=64; 16 heads "
                         "stacked; Tk=200 ends mid-tile"),
    mla_case("tc_mla_spec_tq4", 912, B=2, Tq=4, Tk=150, D=32, mq=16, H=8, dh=16, m=64, p=16,
             dv=16, bf16=True,
             description="bf16 MLA step of 4 tokens (speculative decoding), causal between them; "
                         "the rows of one tile see 147 to 150 keys"),
    mla_case("tc_mla_prefill_t96", 913, B=1, Tq=96, Tk=96, D=32, mq=16, H=4, dh=16, m=64, p=16,
             dv=16, bf16=True,
             description="bf16 MLA prefill, Tq=Tk=96, causal: rows whose keys end in the first or "
                         "the second 64-key tile"),
    mla_case("tc_mla_noncausal_tq3_tk70", 914, B=1, Tq=3, Tk=70, D=24, mq=16, H=6, dh=8, m=48,
             p=8, dv=12, causal=False,
             bf16=True,
             description="bf16 MLA without a mask, Tq=3 < Tk=70, dh=8 != dv=12"),
]


def mla_draw_inputs(c):
    """Inputs for one MLA case, float32: x, ckv, kpe ~ N(0,1); each weight with fan-in f (the
    length of the sum it feeds) ~ N(0, 1/f), so c_q, q, k and v have unit variance, so do the
    scores after the 1/sqrt(dh + p) scale, and y is O(1). A case with bf16=True rounds every
    input to bf16, as draw_inputs does."""
    rng = np.random.default_rng(c["seed"])
    B, Tq, Tk, D, mq, H = c["B"], c["Tq"], c["Tk"], c["D"], c["mq"], c["H"]
    dh, m, p, dv = c["dh"], c["m"], c["p"], c["dv"]

    def f32(shape, fan_in=1):
        x = np.ascontiguousarray(rng.standard_normal(shape) / math.sqrt(fan_in), dtype="<f4")
        return bf16_round(x) if c.get("bf16") else x

    return {
        "x": f32((B, Tq, D)),
        "ckv": f32((B, Tk, m)),
        "kpe": f32((B, Tk, p)),
        "w_dq": f32((D, mq), D),
        "w_uq": f32((mq, H, dh), mq),
        "w_qr": f32((mq, H, p), mq),
        "w_uk": f32((m, H, dh), m),
        "w_uv": f32((m, H, dv), m),
        "w_o": f32((H, dv, D), H * dv),
    }


MLA_INPUTS = ("x", "ckv", "kpe", "w_dq", "w_uq", "w_qr", "w_uk", "w_uv", "w_o")


def mla_reference_outputs(c, inputs):
    """Expected output y (float64) for the float32 inputs of one MLA case."""
    x = [inputs[name].astype(np.float64) for name in MLA_INPUTS]
    return {"y": mla_reference(*x, causal=c["causal"], rope_theta=c["rope_theta"])}


def mla_case_json(c):
    return {"description": c["description"], "causal": c["causal"],
            "rope_theta": c["rope_theta"]}


def write_case(c, out_dir, mla=False):
    """One case folder: an attention case, or an MLA case with mla=True."""
    folder = os.path.join(out_dir, c["name"])
    os.makedirs(folder, exist_ok=True)
    if mla:
        inputs = mla_draw_inputs(c)
        outputs = mla_reference_outputs(c, inputs)
    else:
        inputs = draw_inputs(c)
        outputs = reference_outputs(c, inputs)
    for name, arr in list(inputs.items()) + list(outputs.items()):
        assert not np.isnan(arr).any(), f"{c['name']}/{name}: NaN in the reference"
        np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(arr, dtype="<f4"))
    with open(os.path.join(folder, "case.json"), "w") as f:
        json.dump(mla_case_json(c) if mla else case_json(c), f, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Paged decode (stage 11): the KV cache lives in a pool of fixed-size pages, reached through a
# per-sequence block table
# ---------------------------------------------------------------------------------------------

def paged_case(name, seed, seq_lens, page_size, Hq=2, Hkv=None, Tq=1, d=32, dv=None,
               causal=False, window=0, sink_tokens=0, sinks=False, scale=None, spare_cols=1,
               bf16=False, description=""):
    """A paged decode case: B = len(seq_lens) sequences, sequence b has seq_lens[b] keys and its
    Tq queries are the last Tq of them. spare_cols extra block-table columns (all -1) beyond what
    the longest sequence needs. bf16=True draws inputs that bf16 holds exactly (see
    paged_draw_inputs)."""
    Hkv = Hq if Hkv is None else Hkv
    seq_lens = tuple(int(n) for n in seq_lens)
    assert page_size >= 1 and Hq % Hkv == 0 and spare_cols >= 0
    assert min(seq_lens) >= Tq >= 1, "every sequence must hold at least Tq keys"
    return dict(name=name, seed=seed, seq_lens=seq_lens, page_size=page_size, B=len(seq_lens),
                Hq=Hq, Hkv=Hkv, Tq=Tq, d=d, dv=d if dv is None else dv,
                causal=bool(causal or window > 0), window=window, sink_tokens=sink_tokens,
                sinks=sinks, scale=scale, spare_cols=spare_cols, bf16=bf16,
                description=description)


PAGED_CASES = [
    paged_case("paged_ragged_tq1", 501, seq_lens=(1, 7, 16, 33, 4), page_size=4, Hq=4, Tq=1,
               d=32, causal=True, spare_cols=2,
               description="paged decode, 5 ragged sequences (1, 7, 16, 33, 4 keys) in pages of 4, "
                           "one query each"),
    paged_case("paged_page1", 502, seq_lens=(5, 19), page_size=1, Hq=2, Hkv=1, Tq=1, d=16, dv=24,
               description="paged decode with page_size 1 (one key per page), MQA, d=16 != dv=24"),
    paged_case("paged_gqa_tq3", 503, seq_lens=(3, 20, 41), page_size=8, Hq=8, Hkv=2, Tq=3, d=24,
               causal=True,
               description="paged decode of 3 tokens per sequence, causal among them, GQA 4, d=24"),
    paged_case("paged_noncausal_tq3", 504, seq_lens=(3, 11, 9), page_size=5, Hq=2, Tq=3, d=16,
               description="paged, 3 queries per sequence without a mask: each sees all of its "
                           "sequence's keys"),
    paged_case("paged_gptoss", 505, seq_lens=(1, 31, 100, 300), page_size=16, Hq=16, Hkv=2, Tq=1,
               d=64, window=32, sinks=True, spare_cols=0,
               description="gpt-oss decode step scaled down: GQA 8, d=64, pages of 16, window 32, "
                           "learned sinks"),
    paged_case("paged_gptoss_tq3", 506, seq_lens=(3, 40, 97), page_size=16, Hq=16, Hkv=2, Tq=3,
               d=64, window=32, sinks=True,
               description="gpt-oss decode configuration with 3 new tokens per sequence: GQA 8, "
                           "window 32, learned sinks"),
    paged_case("paged_window_sink_tokens", 507, seq_lens=(3, 5, 26), page_size=4, Hq=4, Hkv=2,
               Tq=3, d=16, window=6, sink_tokens=3,
               description="paged, window 6 plus 3 sink tokens, 3 queries per sequence, GQA 2"),
    paged_case("paged_d80_scale", 508, seq_lens=(13, 50), page_size=7, Hq=2, Tq=1, d=80,
               causal=True, scale=0.3,
               description="paged decode, d=dv=80, pages of 7, explicit scale 0.3"),
    # --- bf16 paged decode on tensor cores (stage 16): d = dv in {64, 128} ----------------------
    # Stage 16 (bf16 split-KV decode over the paged cache, stage 11's child) runs only these head
    # dims, so it needs paged cases of its own; stage 11 (float32) runs them too. Inputs that bf16
    # holds exactly (bf16=True), so the float64 reference is the exact answer to what a bf16 stage
    # reads. Packed rows group * Tq from 1 to 32; stage 16 walks the keys in tiles of 16.
    paged_case("tc_paged_ragged_mqa4_tq1_d64", 1601, seq_lens=(1, 15, 33, 100, 1100),
               page_size=16, Hq=4, Hkv=1, Tq=1, d=64, causal=True, spare_cols=2, bf16=True,
               description="tensor cores, paged decode: 5 ragged sequences (1, 15, 33, 100, 1100 "
                           "keys) in pages of 16, one query each, MQA with 4 query heads, causal, "
                           "d=64: a one-key sequence, NaN tails after every length, and 1100 keys "
                           "(69 key tiles of 16) for the splits to share"),
    paged_case("tc_paged_gptoss_g8_tq1_w128_sinks", 1602, seq_lens=(1, 130, 900), page_size=16,
               Hq=8, Hkv=1, Tq=1, d=64, window=128, sinks=True, spare_cols=0, bf16=True,
               description="tensor cores, paged decode, gpt-oss-like: a group of 8 query heads per "
                           "kv head (Hq=8, Hkv=1), d=64, pages of 16, sliding window W=128, "
                           "learned sinks, one query over 1, 130 and 900 keys (only the last 128 "
                           "count, from the middle of a page)"),
    paged_case("tc_paged_gptoss_g8_tq4_w128_sinks", 1603, seq_lens=(4, 77, 300), page_size=16,
               Hq=16, Hkv=2, Tq=4, d=64, window=128, sinks=True, bf16=True,
               description="tensor cores, paged decode, gpt-oss-like with 4 new tokens per "
                           "sequence (speculative decoding, causal among them): GQA 8 (Hq=16, "
                           "Hkv=2), so 32 packed rows per kv head, window W=128, learned sinks, "
                           "d=64, pages of 16"),
    paged_case("tc_paged_gqa2_tq2_d128_scale", 1604, seq_lens=(2, 16, 47, 250), page_size=16,
               Hq=4, Hkv=2, Tq=2, d=128, causal=True, scale=0.125, bf16=True,
               description="tensor cores, paged decode: 2 new tokens per sequence, causal, GQA 2 "
                           "(Hq=4, Hkv=2), d=128, pages of 16 (a sequence of exactly one full "
                           "page), explicit scale 0.125 (default would be 1/sqrt(128))"),
    paged_case("tc_paged_page5_mqa4_tq3_d128_w16_s7_sinks", 1605, seq_lens=(3, 9, 61, 203),
               page_size=5, Hq=4, Hkv=1, Tq=3, d=128, window=16, sink_tokens=7, sinks=True,
               bf16=True,
               description="tensor cores, paged decode: odd pages of 5, 3 new tokens per "
                           "sequence, MQA with 4 query heads (12 packed rows), d=128, window W=16 "
                           "+ sink_tokens S=7 (over two pages) + learned sinks: in the long "
                           "sequences the sink tokens and the band are apart"),
    paged_case("tc_paged_page64_noncausal_tq3_d64", 1606, seq_lens=(3, 64, 130, 300),
               page_size=64, Hq=2, Hkv=2, Tq=3, d=64, bf16=True,
               description="tensor cores, paged decode: pages of 64, 3 queries per sequence "
                           "without a mask (each sees every key of its sequence, and no more), "
                           "Hq=Hkv=2, d=64"),
    paged_case("tc_paged_gqa2_tq4_d64_t760", 1607, seq_lens=(4, 20, 760), page_size=16, Hq=4,
               Hkv=2, Tq=4, d=64, causal=True, spare_cols=3, bf16=True,
               description="tensor cores, paged decode: 4 new tokens per sequence, causal among "
                           "them, GQA 2 (8 packed rows), d=64, pages of 16, a sequence of exactly "
                           "Tq keys and one of 760 (48 pages, 48 key tiles of 16)"),
    paged_case("tc_paged_mha_tq1_d128", 1608, seq_lens=(1, 17, 64, 200), page_size=16, Hq=2,
               Hkv=2, Tq=1, d=128, causal=True, spare_cols=0, bf16=True,
               description="tensor cores, paged decode: one query per sequence, Hq=Hkv=2 (a "
                           "single packed row), d=128, pages of 16, causal, lengths 1, 17, 64 "
                           "(one full page) and 200"),
]

PAGED_INPUTS = ("q", "k_pages", "v_pages", "block_table", "seq_lens", "sinks")


def pages_needed(c):
    """Pages each sequence occupies: ceil(seq_lens[b] / page_size)."""
    return [-(-n // c["page_size"]) for n in c["seq_lens"]]


def paged_pool_size(c):
    """P, the pages in the pool: the used ones plus a few that no sequence owns (page 0 always
    among them). A function of the case alone, so every seed gives the same shapes."""
    used = sum(pages_needed(c))
    return used + 2 + used // 8


def paged_draw_inputs(c):
    """Inputs for one paged case: q and every sequence's keys and values ~ N(0, 1), sink logits
    ~ U(-1, 2), all float32; the pages of all sequences scattered over the pool in a random
    order, page 0 and a few others left unused; every slot no sequence uses is NaN. A case with
    bf16=True rounds q, the keys, the values and the sink logits to bf16 (as draw_inputs does)
    before they go into the pool, so that a bf16 stage reads exactly the numbers the reference
    uses; the unused slots stay NaN."""
    rng = np.random.default_rng(c["seed"])
    B, Hq, Hkv, Tq, d, dv = c["B"], c["Hq"], c["Hkv"], c["Tq"], c["d"], c["dv"]
    ps, lens = c["page_size"], c["seq_lens"]

    def f32(a):
        x = np.ascontiguousarray(a, dtype="<f4")
        return bf16_round(x) if c.get("bf16") else x

    q = f32(rng.standard_normal((B, Hq, Tq, d)))
    keys = [f32(rng.standard_normal((Hkv, n, d))) for n in lens]       # K_b (Hkv, seq_len, d)
    values = [f32(rng.standard_normal((Hkv, n, dv))) for n in lens]    # V_b (Hkv, seq_len, dv)
    sinks = f32(rng.uniform(-1.0, 2.0, size=Hq)) if c["sinks"] else None

    need, P = pages_needed(c), paged_pool_size(c)
    physical = 1 + rng.permutation(P - 1)      # page 0 stays unused; the rest in random order
    table = np.full((B, max(need) + c["spare_cols"]), -1, dtype="<i4")
    start = 0
    for b in range(B):
        table[b, :need[b]] = physical[start:start + need[b]]
        start += need[b]

    k_pages = np.full((P, ps, Hkv, d), np.nan, dtype="<f4")
    v_pages = np.full((P, ps, Hkv, dv), np.nan, dtype="<f4")
    for b, n in enumerate(lens):
        j = np.arange(n)
        page, slot = table[b, j // ps], j % ps                          # key j of sequence b
        k_pages[page, slot] = keys[b].transpose(1, 0, 2)                # (seq_len, Hkv, d)
        v_pages[page, slot] = values[b].transpose(1, 0, 2)
    inputs = {"q": q, "k_pages": k_pages, "v_pages": v_pages, "block_table": table,
              "seq_lens": np.asarray(lens, dtype="<i4")}
    if sinks is not None:
        inputs["sinks"] = sinks
    return inputs


def gather_sequence(pages, table_row, n):
    """The first n cache entries of one sequence, (1, Hkv, n, width), float64: entry j is slot
    j % page_size of page table_row[j // page_size]. Table entries past its pages are not read."""
    ps = pages.shape[1]
    j = np.arange(n)
    x = pages[table_row[j // ps], j % ps].astype(np.float64)           # (n, Hkv, width)
    return x.transpose(1, 0, 2)[None]


def paged_reference(q, k_pages, v_pages, block_table, seq_lens, scale, causal=False, window=0,
                    sink_tokens=0, sinks=None):
    """o (B, Hq, Tq, dv) and lse (B, Hq, Tq) in float64: for each sequence b, gather its keys and
    values from the pages and run `attention_forward` with B = 1 and Tk = seq_lens[b], so its Tq
    queries sit at positions seq_lens[b] - Tq + t and every masking rule is the stage 10 one."""
    B, Hq, Tq, _ = q.shape
    o = np.zeros((B, Hq, Tq, v_pages.shape[3]))
    lse = np.zeros((B, Hq, Tq))
    for b in range(B):
        n = int(seq_lens[b])
        k = gather_sequence(k_pages, block_table[b], n)
        v = gather_sequence(v_pages, block_table[b], n)
        assert not (np.isnan(k).any() or np.isnan(v).any()), "the table points at a poisoned slot"
        ob, lb, _, _ = attention_forward(q[b:b + 1].astype(np.float64), k, v, scale, causal,
                                         window, sink_tokens, sinks)
        o[b], lse[b] = ob[0], lb[0]
    return o, lse


def paged_scale(c):
    return c["scale"] if c["scale"] is not None else 1.0 / math.sqrt(c["d"])


def paged_reference_outputs(c, inputs):
    """Expected o and lse (float64) for the float32 inputs of one paged case."""
    sinks = inputs.get("sinks")
    o, lse = paged_reference(inputs["q"], inputs["k_pages"], inputs["v_pages"],
                             inputs["block_table"], inputs["seq_lens"], paged_scale(c),
                             c["causal"], c["window"], c["sink_tokens"],
                             None if sinks is None else sinks.astype(np.float64))
    return {"o": o, "lse": lse}


def paged_layout_problems(c, inputs):
    """What is wrong with a paged case's layout ([] when nothing): the table names every used
    page once, in range, -1 after a sequence's pages; exactly the slots no sequence uses are NaN;
    some pages (page 0 included) are unused; the shapes agree with the case."""
    problems = []
    kp, vp, table, lens = (inputs[n] for n in ("k_pages", "v_pages", "block_table", "seq_lens"))
    P, ps = kp.shape[0], kp.shape[1]
    need = pages_needed(c)
    if (kp.shape != (P, c["page_size"], c["Hkv"], c["d"]) or
            vp.shape != (P, c["page_size"], c["Hkv"], c["dv"]) or
            table.shape != (c["B"], max(need) + c["spare_cols"]) or
            tuple(lens) != c["seq_lens"] or
            inputs["q"].shape != (c["B"], c["Hq"], c["Tq"], c["d"])):
        return ["shapes disagree with the case"]
    used = np.zeros((P, ps), dtype=bool)
    owned = []
    for b, n in enumerate(c["seq_lens"]):
        pages = table[b, :need[b]]
        if np.any(pages < 0) or np.any(pages >= P):
            problems.append(f"sequence {b}: a table entry out of [0, {P})")
            continue
        if np.any(table[b, need[b]:] != -1):
            problems.append(f"sequence {b}: entries past its {need[b]} pages are not -1")
        owned += pages.tolist()
        j = np.arange(n)
        used[pages[j // ps], j % ps] = True
    if len(set(owned)) != len(owned):
        problems.append("a page belongs to two sequences (or twice to one)")
    if len(set(owned)) == P or 0 in owned:
        problems.append("no unused page, or page 0 is used")
    for name, pages in (("k_pages", kp), ("v_pages", vp)):
        nan_slot = np.isnan(pages).all(axis=(2, 3))
        if not np.array_equal(nan_slot, ~used) or np.isnan(pages[used]).any():
            problems.append(f"{name}: the NaN slots are not exactly the unused ones")
    return problems


def paged_case_json(c):
    obj = case_json(c)
    obj["page_size"] = c["page_size"]
    return obj


def write_paged_case(c, out_dir):
    """One paged case folder: float32 inputs (k_pages/v_pages NaN in the unused slots), int32
    block_table and seq_lens, expected o and lse."""
    folder = os.path.join(out_dir, c["name"])
    os.makedirs(folder, exist_ok=True)
    inputs = paged_draw_inputs(c)
    problems = paged_layout_problems(c, inputs)
    assert not problems, f"{c['name']}: {'; '.join(problems)}"
    outputs = paged_reference_outputs(c, inputs)
    for name, arr in outputs.items():
        assert np.isfinite(arr).all(), f"{c['name']}/{name}: not finite in the reference"
    for name, arr in list(inputs.items()) + list(outputs.items()):
        dtype = "<i4" if name in ("block_table", "seq_lens") else "<f4"
        np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(arr, dtype=dtype))
    with open(os.path.join(folder, "case.json"), "w") as f:
        json.dump(paged_case_json(c), f, indent=2)
        f.write("\n")


def hidden_seed(n, case_seed):
    """The seed of one case's inputs in the hidden set N (`--seed N`): a SeedSequence of N and the
    case's own fixed seed, so each (N, case) pair has its own stream, reproducible byte for byte.
    (The committed cases use the fixed seed alone, which no N reproduces.)"""
    return np.random.SeedSequence([n, case_seed])


def write_all(out_dir, seed=None):
    """Every case of CASES, MLA_CASES and PAGED_CASES into out_dir; with seed N (`--seed N`) the
    inputs are drawn from hidden_seed(N, case seed) instead of the case's fixed seed, and nothing
    else changes."""
    os.makedirs(out_dir, exist_ok=True)
    names = {c["name"] for c in CASES + MLA_CASES + PAGED_CASES}
    assert len(names) == len(CASES) + len(MLA_CASES) + len(PAGED_CASES), "duplicate case name"
    for entry in sorted(os.listdir(out_dir)):     # drop case folders no longer in the list
        path = os.path.join(out_dir, entry)
        if entry not in names and os.path.isfile(os.path.join(path, "case.json")):
            print(f"removing stale case folder {path}")
            shutil.rmtree(path)

    def seeded(c):
        return c if seed is None else dict(c, seed=hidden_seed(seed, c["seed"]))

    for c in CASES:
        write_case(seeded(c), out_dir)
    for c in MLA_CASES:
        write_case(seeded(c), out_dir, mla=True)
    for c in PAGED_CASES:
        write_paged_case(seeded(c), out_dir)
    from_seed = "" if seed is None else f" from hidden seed {seed}"
    print(f"wrote {len(CASES)} attention, {len(MLA_CASES)} MLA and {len(PAGED_CASES)} paged "
          f"cases to {out_dir}{from_seed}")


def features(c):
    f = ["paged"] if "page_size" in c else []
    if c["causal"] and c["window"] == 0:
        f.append("causal")
    if c["Hq"] != c["Hkv"]:
        f.append("mqa" if c["Hkv"] == 1 else f"gqa{c['Hq'] // c['Hkv']}")
    if c["window"]:
        f.append(f"window={c['window']}")
    if c["sink_tokens"]:
        f.append(f"sink_tokens={c['sink_tokens']}")
    if c["sinks"]:
        f.append("sinks")
    if c["scale"] is not None:
        f.append(f"scale={c['scale']}")
    if c.get("bf16"):
        f.append("bf16-exact inputs")
    return ", ".join(f) or "plain"


def print_table():
    print("| case | B | Hq | Hkv | Tq | Tk | d | dv | features | do (bwd) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in CASES:
        print(f"| `{c['name']}` | {c['B']} | {c['Hq']} | {c['Hkv']} | {c['Tq']} | {c['Tk']} | "
              f"{c['d']} | {c['dv']} | {features(c)} | {'yes' if c['bwd'] else 'no'} |")
    print()
    print("| MLA case | B | Tq | Tk | D | mq | H | dh | m | p | dv | causal | rope_theta | "
          "what it exercises |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in MLA_CASES:
        sizes = " | ".join(str(c[k])
                           for k in ("B", "Tq", "Tk", "D", "mq", "H", "dh", "m", "p", "dv"))
        print(f"| `{c['name']}` | {sizes} | {'yes' if c['causal'] else 'no'} | "
              f"{c['rope_theta']:g} | {c['description']} |")
    print()
    print("| paged case | B | Hq | Hkv | Tq | seq_lens | page_size | P | max_pages | d | dv | "
          "features | what it exercises |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in PAGED_CASES:
        lens = ", ".join(map(str, c["seq_lens"]))
        max_pages = max(pages_needed(c)) + c["spare_cols"]
        print(f"| `{c['name']}` | {c['B']} | {c['Hq']} | {c['Hkv']} | {c['Tq']} | {lens} | "
              f"{c['page_size']} | {paged_pool_size(c)} | {max_pages} | {c['d']} | {c['dv']} | "
              f"{features(c)} | {c['description']} |")


# ---------------------------------------------------------------------------------------------
# Self-test: analytic gradients vs central finite differences, loop reference vs vectorised
# ---------------------------------------------------------------------------------------------

def loop_forward(q, k, v, scale, causal, window, sink_tokens, sinks):
    """Row-by-row forward written straight from the rules, independent of keep_mask."""
    B, Hq, Tq, _ = q.shape
    Hkv, Tk, dv = k.shape[1], k.shape[2], v.shape[3]
    o = np.zeros((B, Hq, Tq, dv))
    lse = np.full((B, Hq, Tq), -np.inf)
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            for i in range(Tq):
                ip = i + Tk - Tq
                cols = []
                for j in range(Tk):
                    seen = True
                    if causal or window > 0:
                        seen = j <= ip and (window == 0 or j > ip - window)
                        if sink_tokens > 0 and j < sink_tokens and j <= ip:
                            seen = True
                    if seen:
                        cols.append(j)
                logits = [scale * float(q[b, h, i] @ k[b, g, j]) for j in cols]
                if sinks is not None:
                    logits.append(float(sinks[h]))
                if not logits:
                    continue
                mx = max(logits)
                z = sum(math.exp(s - mx) for s in logits)
                lse[b, h, i] = mx + math.log(z)
                for s, j in zip(logits, cols):
                    o[b, h, i] += math.exp(s - lse[b, h, i]) * v[b, g, j]
    return o, lse


def selftest_one(label, rng, B, Hq, Hkv, Tq, Tk, d, dv, causal, window, sink_tokens,
                 use_sinks=True):
    q = rng.standard_normal((B, Hq, Tq, d))
    k = rng.standard_normal((B, Hkv, Tk, d))
    v = rng.standard_normal((B, Hkv, Tk, dv))
    do = rng.standard_normal((B, Hq, Tq, dv))
    sinks = rng.uniform(-1.0, 2.0, size=Hq) if use_sinks else None
    scale = 1.0 / math.sqrt(d)
    args = (scale, causal, window, sink_tokens)

    o, lse, P, P_sink = attention_forward(q, k, v, *args, sinks)
    dq, dk, dv_, dsinks = attention_backward(q, k, v, o, P, P_sink, do, scale)

    o_loop, lse_loop = loop_forward(q, k, v, *args, sinks)
    with np.errstate(invalid="ignore"):                # -inf - -inf; equal infinities count as 0
        lse_diff = np.where(lse == lse_loop, 0.0, np.abs(lse - lse_loop))
    fwd_err = max(np.max(np.abs(o - o_loop)), np.max(lse_diff))
    fwd_err = math.inf if math.isnan(fwd_err) else fwd_err

    empty = ~keep_mask(Tq, Tk, causal, window, sink_tokens).any(axis=1)
    empty_lse = -np.inf if sinks is None else sinks[None, :, None]
    empty_ok = (np.all(o[:, :, empty] == 0) and np.all(lse[:, :, empty] == empty_lse) and
                np.all(dq[:, :, empty] == 0))
    nan_free = not any(np.isnan(a).any() for a in (o, lse, dq, dk, dv_, dsinks) if a is not None)

    def loss(qq, kk, vv, ss):
        return float(np.sum(attention_forward(qq, kk, vv, *args, ss)[0] * do))

    h = 1e-5
    tensors = {"q": q, "k": k, "v": v}
    analytic = {"q": dq, "k": dk, "v": dv_}
    if sinks is not None:
        tensors["sinks"], analytic["sinks"] = sinks, dsinks
    worst = 0.0
    report = []
    for name, x in tensors.items():
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            saved = x[idx]
            x[idx] = saved + h
            up = loss(q, k, v, sinks)
            x[idx] = saved - h
            down = loss(q, k, v, sinks)
            x[idx] = saved
            fd[idx] = (up - down) / (2 * h)
        rel = np.max(np.abs(analytic[name] - fd)) / max(np.max(np.abs(fd)), 1e-30)
        worst = max(worst, rel)
        report.append(f"d{name} {rel:.2e}")
    print(f"selftest {label}: (B,Hq,Hkv,Tq,Tk,d,dv)=({B},{Hq},{Hkv},{Tq},{Tk},{d},{dv}) "
          f"causal={causal} window={window} sink_tokens={sink_tokens} "
          f"sinks={'yes' if use_sinks else 'no'} "
          f"rows without keys={int(empty.sum())}")
    print(f"  max relative error vs finite differences: {', '.join(report)}")
    print(f"  vectorised vs loop forward: max abs diff {fwd_err:.2e}; "
          f"empty rows (o=0, lse={'sink' if use_sinks else '-inf'}, dq=0): "
          f"{'ok' if empty_ok else 'WRONG'}; "
          f"NaN-free: {'ok' if nan_free else 'WRONG'}")
    return worst <= 1e-6 and fwd_err <= 1e-12 and empty_ok and nan_free, worst


def mla_absorbed(x, ckv, kpe, w_dq, w_uq, w_qr, w_uk, w_uv, w_o, causal=True,
                 rope_theta=10000.0):
    """MLA forward with W_uk and W_uv absorbed: attention runs on the latent cache itself
    (c_q, q_nope and q_pe as in `mla_reference`).
        q_lat[b,h,i] = q_nope[b,h,i] W_uk[:, h]^T                      (width m)
        s[b,h,i,j]   = (q_lat . ckv[b,j] + q_pe . kpe[b,j]) / sqrt(dh + p)
        o_lat[b,h,i] = sum_j P ckv[b,j]                                (width m)
        o[b,h,i]     = o_lat[b,h,i] W_uv[:, h];   y[b,i] = sum_h o[b,h,i] W_o[h]
    Exactly `mla_reference` by associativity: q_nope.(ckv W_uk) = (q_nope W_uk^T).ckv, and
    sum_j P (ckv W_uv) = (sum_j P ckv) W_uv."""
    Tq, Tk = x.shape[1], ckv.shape[1]
    dh, p = w_uk.shape[2], kpe.shape[2]
    c_q = x @ w_dq
    q_nope = np.einsum("bic,chd->bhid", c_q, w_uq)
    q_pe = rope(np.einsum("bic,chr->bhir", c_q, w_qr), np.arange(Tq) + (Tk - Tq), rope_theta)
    q_lat = np.einsum("bhid,chd->bhic", q_nope, w_uk)           # (B, H, Tq, m)
    S = (np.einsum("bhic,bjc->bhij", q_lat, ckv) +
         np.einsum("bhir,bjr->bhij", q_pe, kpe)) / math.sqrt(dh + p)
    o_lat = np.einsum("bhij,bjc->bhic", mla_softmax(S, causal), ckv)
    o = np.einsum("bhic,chd->bhid", o_lat, w_uv)
    return np.einsum("bhid,hdn->bin", o, w_o)


def mla_loop(x, ckv, kpe, w_dq, w_uq, w_qr, w_uk, w_uv, w_o, causal, rope_theta):
    """Row-by-row MLA written straight from the formulas (scalar RoPE, explicit causal test),
    independent of `rope`, `keep_mask` and `mla_softmax`."""
    B, Tq, D = x.shape
    Tk, p = ckv.shape[1], kpe.shape[2]
    H, dh = w_uq.shape[1], w_uq.shape[2]
    scale = 1.0 / math.sqrt(dh + p)
    y = np.zeros((B, Tq, D))
    for b in range(B):
        for i in range(Tq):
            pos = Tk - Tq + i
            c_q = x[b, i] @ w_dq
            for h in range(H):
                q_nope = c_q @ w_uq[:, h, :]
                r = c_q @ w_qr[:, h, :]
                q_pe = np.zeros(p)
                for t in range(p // 2):
                    a = pos * rope_theta ** (-2.0 * t / p)
                    q_pe[2 * t] = r[2 * t] * math.cos(a) - r[2 * t + 1] * math.sin(a)
                    q_pe[2 * t + 1] = r[2 * t] * math.sin(a) + r[2 * t + 1] * math.cos(a)
                cols = [j for j in range(Tk) if not causal or j <= pos]
                logits = [scale * float(q_nope @ (ckv[b, j] @ w_uk[:, h, :]) + q_pe @ kpe[b, j])
                          for j in cols]
                mx = max(logits)
                z = sum(math.exp(s - mx) for s in logits)
                o = sum(math.exp(s - mx) / z * (ckv[b, j] @ w_uv[:, h, :])
                        for s, j in zip(logits, cols))
                y[b, i] += o @ w_o[h]
    return y


def selftest_mla():
    """Every MLA case's inputs (float32 values, in float64): the absorbed form and the row loop
    must give the naive reference's y to 1e-10 relative (max |diff| / max |y|)."""
    worst_abs, worst_loop = 0.0, 0.0
    for c in MLA_CASES:
        args = [mla_draw_inputs(c)[name].astype(np.float64) for name in MLA_INPUTS]
        kw = dict(causal=c["causal"], rope_theta=c["rope_theta"])
        y = mla_reference(*args, **kw)
        scale = max(np.max(np.abs(y)), 1e-300)
        rel_abs = np.max(np.abs(mla_absorbed(*args, **kw) - y)) / scale
        rel_loop = np.max(np.abs(mla_loop(*args, **kw) - y)) / scale
        worst_abs, worst_loop = max(worst_abs, rel_abs), max(worst_loop, rel_loop)
        print(f"selftest {c['name']}: absorbed vs naive {rel_abs:.2e}, row loop vs naive "
              f"{rel_loop:.2e} (max relative difference in y, max |y| = {scale:.3f})")
    ok = worst_abs <= 1e-10 and worst_loop <= 1e-10
    print(f"selftest MLA {'PASSED' if ok else 'FAILED'}: absorbed vs naive {worst_abs:.2e}, "
          f"row loop vs naive {worst_loop:.2e} (limit 1e-10)")
    return ok


def paged_loop(q, k_pages, v_pages, block_table, seq_lens, scale, causal, window, sink_tokens,
               sinks):
    """Key-by-key paged forward written straight from the rules: every key is read from its page
    and slot through the block table, one at a time (no gather, no keep_mask, no
    attention_forward)."""
    B, Hq, Tq, _ = q.shape
    ps, Hkv, dv = k_pages.shape[1], k_pages.shape[2], v_pages.shape[3]
    o = np.zeros((B, Hq, Tq, dv))
    lse = np.full((B, Hq, Tq), -np.inf)
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(Hq):
            g = h // (Hq // Hkv)
            for t in range(Tq):
                pos = n - Tq + t                       # the query's position in its sequence
                logits, vals = [], []
                for j in range(n):
                    if causal or window > 0:
                        seen = j <= pos and (window == 0 or j > pos - window)
                        seen = seen or (j < sink_tokens and j <= pos)
                    else:
                        seen = True
                    if not seen:
                        continue
                    page, slot = int(block_table[b, j // ps]), j % ps
                    key = k_pages[page, slot, g].astype(np.float64)
                    logits.append(scale * float(q[b, h, t].astype(np.float64) @ key))
                    vals.append(v_pages[page, slot, g].astype(np.float64))
                if sinks is not None:
                    logits.append(float(sinks[h]))
                    vals.append(np.zeros(dv))
                if not logits:
                    continue
                mx = max(logits)
                lse[b, h, t] = mx + math.log(sum(math.exp(s - mx) for s in logits))
                for s, val in zip(logits, vals):
                    o[b, h, t] += math.exp(s - lse[b, h, t]) * val
    return o, lse


def selftest_paged():
    """Every paged case's inputs: the layout is as documented (each used page once, -1 past a
    sequence's pages, NaN in exactly the unused slots), and a key-by-key loop through the block
    table gives the gather-based reference's o and lse to 1e-12."""
    worst, ok = 0.0, True
    for c in PAGED_CASES:
        x = paged_draw_inputs(c)
        problems = paged_layout_problems(c, x)
        ref = paged_reference_outputs(c, x)
        sinks = x.get("sinks")
        o, lse = paged_loop(x["q"], x["k_pages"], x["v_pages"], x["block_table"], x["seq_lens"],
                            paged_scale(c), c["causal"], c["window"], c["sink_tokens"],
                            None if sinks is None else sinks.astype(np.float64))
        diff = max(np.max(np.abs(o - ref["o"])), np.max(np.abs(lse - ref["lse"])))
        diff = math.inf if math.isnan(diff) else diff
        worst = max(worst, diff)
        ok &= not problems and diff <= 1e-12
        unused = int(np.isnan(x["k_pages"]).all(axis=(2, 3)).sum())
        print(f"selftest {c['name']}: layout {'ok' if not problems else '; '.join(problems)} "
              f"({unused} NaN slots of {x['k_pages'].shape[0] * c['page_size']}); "
              f"page loop vs gather {diff:.2e}")
    print(f"selftest paged {'PASSED' if ok else 'FAILED'}: page loop vs gather {worst:.2e} "
          "(limit 1e-12)")
    return ok


def selftest():
    rng = np.random.default_rng(12345)
    ok1, w1 = selftest_one("A", rng, B=2, Hq=4, Hkv=2, Tq=7, Tk=5, d=3, dv=2, causal=True,
                           window=3, sink_tokens=1)
    ok2, w2 = selftest_one("B", rng, B=1, Hq=3, Hkv=1, Tq=4, Tk=9, d=5, dv=4, causal=True,
                           window=4, sink_tokens=2)
    ok3, w3 = selftest_one("C", rng, B=1, Hq=2, Hkv=2, Tq=3, Tk=6, d=4, dv=3, causal=False,
                           window=0, sink_tokens=0)
    ok4, w4 = selftest_one("D", rng, B=1, Hq=2, Hkv=1, Tq=6, Tk=3, d=3, dv=5, causal=True,
                           window=0, sink_tokens=0, use_sinks=False)
    ok = ok1 and ok2 and ok3 and ok4
    print(f"selftest {'PASSED' if ok else 'FAILED'}: worst relative gradient error "
          f"{max(w1, w2, w3, w4):.2e} (limit 1e-6)")
    ok_mla = selftest_mla()
    ok_paged = selftest_paged()
    return 0 if ok and ok_mla and ok_paged else 1


def seed_usage_problem(args):
    """'' when `--seed` is used as it must be, else the one-line reason to refuse it."""
    if not re.fullmatch(r"[0-9]+", args.seed):
        return f"--seed N takes a non-negative integer, not {args.seed!r}"
    if args.selftest or args.list or args.large:
        return ("--seed writes the whole hidden case list; it does not go with --selftest, "
                "--list or --large")
    if args.out is None:
        return ("--seed needs --out DIR (a folder for the hidden cases; the committed "
                "golden/cases are never rewritten from a hidden seed)")
    committed, out = os.path.realpath(DEFAULT_OUT), os.path.realpath(args.out)
    if out == committed or out.startswith(committed + os.sep):
        return (f"--seed: --out {args.out} is the committed golden/cases folder (or inside it); "
                "write the hidden cases somewhere else")
    return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write flashlab's golden case folders (NumPy, "
                                             "float64 reference).")
    ap.add_argument("--out", help="output folder (default: golden/cases)")
    ap.add_argument("--seed", metavar="N",
                    help="hidden cases for grading: the same case list with inputs drawn from "
                         "seed N (a non-negative integer); needs --out, never golden/cases")
    ap.add_argument("--selftest", action="store_true",
                    help="check the gradients against finite differences, the MLA and paged "
                         "references against loops, and exit")
    ap.add_argument("--list", action="store_true", help="print the cases as a markdown table")
    ap.add_argument("--large", metavar="NAME", choices=[c["name"] for c in LARGE_CASES],
                    help="write only this large (uncommitted) case into --out")
    args = ap.parse_args(argv)
    if args.seed is not None:
        problem = seed_usage_problem(args)
        if problem:
            print(f"make_golden.py: {problem}", file=sys.stderr)
            return 2
        write_all(args.out, seed=int(args.seed))
        return 0
    if args.out is None:
        args.out = DEFAULT_OUT
    if args.large:
        write_case(next(c for c in LARGE_CASES if c["name"] == args.large), args.out)
        print(f"wrote {args.large} to {args.out}")
        return 0
    if args.selftest:
        return selftest()
    if args.list:
        print_table()
        return 0
    write_all(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
