/* cuda_fa2_tiles.cuh — the tile configurations of the float32 FlashAttention-2 kernels, once for
 * stages 05 to 10 and 13: the thread layout and shared-memory size that a configuration implies (Fa2Tile
 * for the forward, BwdTile and BwdSmem for the backward), the configuration each padded head dim
 * uses (FA2_CONFIG_D*, BwdConfig), and the padding of (d, dv) to one of them (fa2_padded_dim).
 * A tuning change is one edit here, and every stage that runs these kernels gets it. The kernels
 * themselves stay in their stages: they are the lessons. stages/05_fa2/README.md walks the forward
 * layout and stages/06_backward/README.md the backward one. */
#ifndef FLASHLAB_CUDA_FA2_TILES_CUH
#define FLASHLAB_CUDA_FA2_TILES_CUH

#include <stddef.h>

// ---- forward: one block owns Br query rows and walks the K/V tiles of Bc keys --------------------
// A TM x TN micro-tile of S per thread: RG = Br/TM row groups times CG = Bc/TN column groups (the
// CG threads of a row are neighbours in one warp). OQ float4 chunks of a row of O per thread.
// Shared memory (floats): Qs (Br, D+4), Ks (Bc, D+4), Vs (Bc, D), Ps (Br, Bc+CG).
template <int D, int BR, int BC, int TM, int TN> struct Fa2Tile {
    static constexpr int RG = BR / TM, CG = BC / TN, NT = RG * CG;
    static constexpr int OQ = D / (4 * CG); // float4 chunks of O per thread and row
    static constexpr int QS = D + 4, KS = D + 4, VS = D, PS = BC + CG;
    static constexpr int SMEM_FLOATS = BR * QS + BC * KS + BC * VS + BR * PS;
    static constexpr size_t SMEM_BYTES = SMEM_FLOATS * sizeof(float);
    static_assert(32 % CG == 0 && NT % 32 == 0, "a row's threads must share one warp");
    static_assert(D % (4 * CG) == 0 && BC % 4 == 0, "float4 chunks must tile D and Bc");
};

// The configurations the stages use, one per padded head dim: <D, Br, Bc, TM, TN, min blocks/SM>.
// All use Br = 128 (the HBM model's closed form depends on it: FA2_BLOCK_R). Picked by timing
// on an H200 (stages/05_fa2/README.md): at D = 64 an 8x8 micro-tile in 128 threads, at D = 128 a 4x8 micro-tile
// in 256 threads (an 8x8 one would need 128 registers of O per thread).
#define FA2_BLOCK_R 128
#define FA2_CONFIG_D32 32, FA2_BLOCK_R, 64, 4, 8, 2
#define FA2_CONFIG_D64 64, FA2_BLOCK_R, 64, 8, 8, 2
#define FA2_CONFIG_D96 96, FA2_BLOCK_R, 64, 4, 8, 1
#define FA2_CONFIG_D128 128, FA2_BLOCK_R, 64, 4, 8, 1

static inline int fa2_padded_dim(int d, int dv)
{
    const int x = d > dv ? d : dv;
    return (x + 31) / 32 * 32;
}

// ---- backward: one block owns Bc keys (dK_j, dV_j) or Br query rows (dQ_i) ----------------------
// Thread layouts of the backward kernels: NT threads (256 in BwdConfig), tiles of Br query rows
// and Bc keys. The block works as two halves of NT/2 threads, each on its own product, so that
// every thread owns a large micro-tile (few shared-memory reads per FMA) without holding both
// dK_j and dV_j:
//   half 0: S = Q_i K_j^T -> P,  then dV_j += P^T dO_i          (holds dV_j)
//   half 1: dP = dO_i V_j^T,     then dS, then dK_j += dS^T Q_i  (holds dK_j)
//   scores (Br, Bc) in a half:  SRG x SCG threads, an STM x STN micro-tile each (A B^T)
//   dV_j / dK_j (Bc, D) in a half: ORG x OCG threads, KTM rows x OQ float4 columns each (A B)
//   dQ_i (Br, D) over the whole block: QRG x QCG threads, QTM rows x QQ float4 columns each
// Shared memory (floats; +4 pads keep a warp's float4 reads on distinct banks):
//   Qs, dOs (Br, D+4)   Ks, Vs (Bc, D+4)   PTs, dSTs (Bc, Br+4) = P^T, dS^T   dSs (Br, Bc+4)
//   Ls, Ds (Br)
template <int D_, int BR_, int BC_, int NT_, int MINB_> struct BwdTile {
    static constexpr int D = D_, BR = BR_, BC = BC_, NT = NT_, MINB = MINB_, HALF = NT / 2;
    // 16 threads share a row of the score tiles (8 x 4 micro-tiles); 16 share a row of dV_j / dK_j
    // when D is a multiple of 64, else 8 (stages/06_backward/README.md, "Thread layout").
    static constexpr int SCG = 16, SRG = HALF / SCG, STM = BR / SRG, STN = BC / SCG;
    static constexpr int OCG = (D / 4) % 16 == 0 ? 16 : 8, ORG = HALF / OCG, KTM = BC / ORG,
                         OQ = D / (4 * OCG);
    static constexpr int QCG = (D / 4) % 16 == 0 ? 16 : 8, QRG = NT / QCG, QTM = BR / QRG,
                         QQ = D / (4 * QCG);
    static constexpr int QS = D + 4, PTS = BR + 4, DSS = BC + 4;
    static constexpr int SMEM_FLOATS = 2 * BR * QS + 2 * BC * QS + 2 * BC * PTS + BR * DSS + 2 * BR;
    static constexpr size_t SMEM_BYTES = SMEM_FLOATS * sizeof(float);
    static_assert(STM * SRG == BR && STN * SCG == BC && KTM * ORG == BC && QTM * QRG == BR,
                  "tiles must split evenly over the threads");
    static_assert(OQ * 4 * OCG == D && QQ * 4 * QCG == D, "float4 chunks must tile D");
};

// The shared-memory tiles of one backward block, carved from the dynamic allocation.
template <class T> struct BwdSmem {
    static constexpr int BR = T::BR, BC = T::BC;
    float *Qs, *dOs, *Ks, *Vs, *PTs, *dSTs, *dSs, *Ls, *Ds;
    __device__ explicit BwdSmem(float *base)
    {
        Qs = base;                 // Q_i   (Br, D)
        dOs = Qs + BR * T::QS;     // dO_i  (Br, D)
        Ks = dOs + BR * T::QS;     // K_j   (Bc, D)
        Vs = Ks + BC * T::QS;      // V_j   (Bc, D)
        PTs = Vs + BC * T::QS;     // P_ij^T   (Bc, Br)
        dSTs = PTs + BC * T::PTS;  // dS_ij^T  (Bc, Br)
        dSs = dSTs + BC * T::PTS;  // dS_ij    (Br, Bc)
        Ls = dSs + BR * T::DSS;    // lse_i    (Br)
        Ds = Ls + BR;              // D_i      (Br)
    }
};

// The backward's tiles for every padded head dim: Br = Bc = 64, 256 threads, one block per SM.
// (Tried on an H100 at T = 4096: 32 x 32 tiles in 128 threads with two blocks per SM gave
// d = 64 1% faster and d = 128 11% slower.) The HBM-model test assumes Bc = 64.
template <int D> using BwdConfig = BwdTile<D, 64, 64, 256, 1>;

#endif
