#!/usr/bin/env python3
"""A CPU model of the wgmma (sm_90a) GEMM mainloop in device/cuda/weft.cuh (`WEFT_GEMM_USES_WGMMA`), to check its
shared-memory layouts, matrix descriptors and accumulator mapping without a GPU. Standard library only:
`python3 scripts/wgmma_layout_model.py` (exit 0 = every check passed; `-v` prints more).

What it checks:
 1. gemm_load_stage (wgmma branch) fills each 8 KiB stage of A and B as a bijection (no overlap, no hole).
 2. For every wgmma the mainloop issues (2 warpgroups x 2 k-steps per stage), the descriptor built by wgmma_desc
    is decoded field by field and the hardware's read address for every logical element A[m][k] (m < 64, k < 16)
    and B[k][n] (k < 16, n < 128) is computed from the PTX ISA canonical layouts (9.7.15.5.1.2.1.3, the same
    formulas as CuTe make_gmma_desc): K-major SW64  ((8,m),(T,2k)):((4T,SBO),(1,T))      for A (imm-trans-a = 0),
                                     MN-major SW64 ((T,4,m),(8,k)):((1,T,LBO),(4T,SBO))  for B (imm-trans-b = 1),
    followed by the 64-byte swizzle Swizzle<2,4,3> (address bits [4,6) ^= bits [7,9)) applied to the ABSOLUTE
    shared-memory byte address (CuTe pointer_swizzle.hpp: "Arch chose to design hardware with position-dependent
    swizzles"; PTX: base offset is 0 when the pattern starts on a 512-byte boundary for 64B swizzle). The element
    found there must be the one the multiply needs (every element carries a distinct id).
 3. The accumulator: for each thread 0..255 and register d0..d63, the (row, col) that wgmma m64nNk16 .f32 assigns
    (CuTe CLayout_64xN, = PTX Figure "WGMMA .m64nNk16 register fragment layout for accumulator matrix D") against
    GemmTile::row(i)/col(i) with warpgroups = true, through the asm operand order of WEFT_WGMMA_M64N128K16 (parsed
    from weft.cuh) and GemmTile::value(i).
 4. End to end: a full 3-stage pipelined tile product with the reads of (2) and the mapping of (3), scattered
    through GemmTile::row/col, equals A @ B exactly (integers).
Assumption: the stage base addresses are 1024-byte aligned in the shared window (alignas(1024) on the __shared__
arrays; nvcc emits `.shared .align 1024` for them). The script tries several aligned bases, and reports (without
failing) what a base off by 16/128/256/512 bytes would do: 512-byte alignment (the 64B swizzle's repeat) suffices,
less does not. `WEFT_CUH=path` points it at another copy of weft.cuh.
The modelled formulas are transcribed from weft.cuh; a drift guard fails if those source lines change."""
import os
import random
import re
import sys

from model_guard import GEMM_COPIES_LINES, read_transcribed

VERBOSE = "-v" in sys.argv
HERE = os.path.dirname(os.path.abspath(__file__))
CUH = os.environ.get("WEFT_CUH", os.path.join(HERE, "..", "device", "cuda", "weft.cuh"))

GEMM_BK, GEMM_STAGES, ELEM = 32, 3, 2  # bf16 / f16: 2 bytes (both types share every layout below)
STAGE_BYTES = 128 * GEMM_BK * ELEM  # 8192, both operands
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        if len(failures) <= 20:
            print("MISMATCH:", msg)
    return cond


# ---------------------------------------------------------------- drift guard: the lines this model transcribes
EXPECTED_SOURCE = [
    "constexpr int GEMM_STAGES = 3;",
    "constexpr int GEMM_BK = 32;",
    *GEMM_COPIES_LINES,
    "b_to = (bc / 4) * 1024 + br * 32 + (((bc % 4) ^ ((br >> 1) & 3)) * 8);",
    "constexpr uint32_t B_SECOND = 16 * 32;",
    "return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |",
    "(uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (layout << 62);",
    "return smem_matrix_desc(shared_u32(smem), leading_bytes, stride_bytes, 2);",
    "ta += (threadIdx.x / 128) * 64 * GEMM_BK;",
    "wgmma_m64n128k16<T>(tile, wgmma_desc(ta + kk * 16, 16, 512), wgmma_desc(tb + kk * 16 * 32, 2048, 512));",
    "size_t in_fragment = lane / 4 + (e >= 2 ? 8 : 0);",
    "if (warpgroups) return (warp / 4) * 64 + (warp % 4) * 16 + in_fragment;",
    "size_t in_fragment = (lane % 4) * 2 + (e & 1);",
    "if (warpgroups) return f * 8 + in_fragment;",
    "WEFT_FN float value(size_t i) const { return acc[(i / 4) / 4][(i / 4) % 4].c[i % 4]; }",
    "__shared__ alignas(1024) T sa[GEMM_STAGES][128 * GEMM_BK];",
    "__shared__ alignas(1024) T sb[GEMM_STAGES][GEMM_BK * 128];",
]
src = read_transcribed(CUH, EXPECTED_SOURCE, "weft.cuh")
# The wgmma asm: shape/types, operands, immediates (scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b).
m = re.search(r'wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\." TYPE "\." TYPE " \{([^}]*)\}, %64, %65, '
              r'(\d+), (\d+), (\d+), (\d+), (\d+);"', src)
check(m is not None, "WEFT_WGMMA_M64N128K16 asm string not found / changed")
IMM = tuple(int(x) for x in m.groups()[1:]) if m else None
check(IMM == (1, 1, 1, 0, 1), "wgmma immediates are %s, modelled (1,1,1,0,1)" % (IMM,))
TRANS_A, TRANS_B = (IMM[3], IMM[4]) if IMM else (0, 1)
macro = src[src.index("#define WEFT_WGMMA_M64N128K16"):src.index("#undef WEFT_WGMMA_M64N128K16")]
outs = re.findall(r'"\+f"\(t\.acc\[(\d)\]\[(\d)\]\.c\[(\d)\]\)', macro)
check(len(outs) == 64, "asm has %d '+f' accumulator operands, expected 64" % len(outs))
ins = re.findall(r'"l"\((desc_a|desc_b)\)', macro)
check(ins == ["desc_a", "desc_b"], "asm inputs %s, expected %%64=desc_a, %%65=desc_b" % ins)
# operand index (= wgmma register d<v>) of each acc slot
OPERAND_OF_SLOT = {(int(a), int(b), int(c)): v for v, (a, b, c) in enumerate(outs)}


# ---------------------------------------------------------------- weft.cuh, transcribed
def gemm_load_stage(smem, sa_base, sb_base, a_glob, lda, b_glob, ldb, kt):
    """k-tile kt's copies, as GemmCopies makes them (the wgmma layout): each thread's two A chunks (rows ar and
    ar + 64) and two B chunks (k-rows br and br + 16) at its offsets a_to, b_to and those plus 64 * 32 and 16 * 32,
    its sources advanced kt k-tiles. smem: dict byte address -> element id; a_glob/b_glob: flat lists (a, b already
    at row0/col0). Returns the element offsets written, to check the bijection."""
    wa, wb = [], []
    for tid in range(256):
        ar, ac, br, bc = tid // 4, tid % 4, tid // 16, tid % 16
        a_to = ar * 32 + ((ac ^ ((ar >> 1) & 3)) * 8)
        b_to = (bc // 4) * 1024 + br * 32 + (((bc % 4) ^ ((br >> 1) & 3)) * 8)
        a_from = ar * lda + ac * 8 + kt * GEMM_BK
        b_from = br * ldb + bc * 8 + kt * GEMM_BK * ldb
        for dst, src in ((a_to, a_from), (a_to + 64 * 32, a_from + 64 * lda)):
            for j in range(8):  # cp.async 16 bytes = 8 elements, in order
                smem[sa_base + (dst + j) * ELEM] = a_glob[src + j]
                wa.append(dst + j)
        for dst, src in ((b_to, b_from), (b_to + 16 * 32, b_from + 16 * ldb)):
            for j in range(8):
                smem[sb_base + (dst + j) * ELEM] = b_glob[src + j]
                wb.append(dst + j)
    return wa, wb


def wgmma_desc(smem_addr, leading_bytes, stride_bytes):
    address = smem_addr & 0xFFFFFFFF
    return (((address & 0x3FFFF) >> 4) | (((leading_bytes >> 4) & 0x3FFF) << 16) |
            (((stride_bytes >> 4) & 0x3FFF) << 32) | (2 << 62))


def gemm_stage_descs(tid, ta_base, tb_base, kk):
    """The two descriptors thread tid passes for k step kk (element pointers converted to byte addresses)."""
    ta = ta_base + (tid // 128) * 64 * GEMM_BK * ELEM
    return (wgmma_desc(ta + kk * 16 * ELEM, 16, 512), wgmma_desc(tb_base + kk * 16 * 32 * ELEM, 2048, 512))


def gemmtile_row_col(tid, i):
    warp, lane = tid // 32, tid % 32
    f, e = i // 4, i % 4
    row = (warp // 4) * 64 + (warp % 4) * 16 + lane // 4 + (8 if e >= 2 else 0)
    col = f * 8 + (lane % 4) * 2 + (e & 1)
    return row, col


def gemmtile_value_slot(i):
    return ((i // 4) // 4, (i // 4) % 4, i % 4)


# ---------------------------------------------------------------- the hardware, per PTX ISA / CuTe
def decode_desc(d):
    return dict(start=(d & 0x3FFF) << 4, lbo=((d >> 16) & 0x3FFF) << 4, sbo=((d >> 32) & 0x3FFF) << 4,
                base_offset=(d >> 49) & 7, layout=(d >> 62) & 3)


SWIZZLE_BYTES = {1: 128, 2: 64, 3: 32}  # layout type -> swizzle width (PTX Matrix Descriptor Format; CuTe LayoutType)


def swizzle_abs(addr, layout):
    """CuTe Swizzle<B,4,3> on the byte address: offset ^ ((offset & yyy_msk) >> 3), yyy_msk = ((1<<B)-1) << 7."""
    b = {1: 3, 2: 2, 3: 1}[layout]
    yyy = ((1 << b) - 1) << 7
    return addr ^ ((addr & yyy) >> 3)


def canonical_offset(major, mn, k, lbo, sbo, layout):
    """Byte offset (before swizzle) of element (mn, k) of a 16-bit operand in a swizzled canonical layout.
    PTX 9.7.15.5.1.2.1.3, T = 8 elements per 16 bytes, W = swizzle bytes / 16:
      K-major : ((8,m),(T,2k)) : ((W*T, SBO), (1, T))          [LBO unused for swizzled K-major]
      MN-major: ((T,W,m),(8,k)) : ((1, T, LBO), (W*T, SBO))"""
    T, W = 8, SWIZZLE_BYTES[layout] // 16
    if major == "K":
        assert 0 <= k < 16
        r0, r1 = mn % 8, mn // 8
        return ELEM * (r0 * W * T + k) + r1 * sbo  # k in [0,16): T*k1 + k0 with stride (1,T) = contiguous
    n0, n1, n2 = mn % T, (mn // T) % W, mn // (T * W)
    k0, k1 = k % 8, k // 8
    return ELEM * (n0 + T * n1 + W * T * k0) + n2 * lbo + k1 * sbo


def hw_read(smem, desc, major, mn, k, swizzle_origin="absolute"):
    f = decode_desc(desc)
    check(f["layout"] == 2, "descriptor layout type %d, expected 2 (64B swizzle)" % f["layout"])
    check(f["base_offset"] == 0, "descriptor base offset %d" % f["base_offset"])
    off = canonical_offset(major, mn, k, f["lbo"], f["sbo"], f["layout"])
    if swizzle_origin == "absolute":
        addr = swizzle_abs(f["start"] + off, f["layout"])
    else:  # counterfactual: swizzle relative to the descriptor start (not what the hardware does)
        addr = f["start"] + swizzle_abs(off, f["layout"])
    return smem.get(addr, ("hole", addr))


def cute_layout(shape, stride, coord_flat):
    """Evaluate a (nested, flattened here) CuTe layout at a 1-D coordinate: colexicographic decomposition."""
    idx = 0
    for s, d in zip(shape, stride):
        idx += (coord_flat % s) * d
        coord_flat //= s
    return idx


def wgmma_d_row_col(t, v, n=128):
    """CuTe CLayout_64xN = Layout<Shape<Shape<_4,_8,_4>,Shape<_2,_2,N/8>>, Stride<Stride<_128,_1,_16>,
    Stride<_64,_8,_512>>>: (thread t in warpgroup, value v) -> column-major index in the 64 x N tile."""
    idx = cute_layout((4, 8, 4), (128, 1, 16), t) + cute_layout((2, 2, n // 8), (64, 8, 512), v)
    return idx % 64, idx // 64


# ---------------------------------------------------------------- 1-2: stage fill and descriptor reads
def check_reads(sa0, sb0, swizzle_origin="absolute", quiet=False, descs_fn=None, trans=None):
    """Fill every stage with distinct ids for one k-tile and check every element every wgmma reads.
    Returns the number of wrong/missing elements."""
    bad = 0
    ta_, tb_ = trans or (TRANS_A, TRANS_B)
    K, lda, ldb = 4 * GEMM_BK, 4 * GEMM_BK + 8, 128 + 24
    a_glob = [("A", r, c) for r in range(128) for c in range(lda)]
    b_glob = [("B", r, c) for r in range(K) for c in range(ldb)]
    for s in range(GEMM_STAGES):
        sa, sb = sa0 + s * STAGE_BYTES, sb0 + s * STAGE_BYTES
        kt = (s + 1) % 4
        smem = {}
        wa, wb = gemm_load_stage(smem, sa, sb, a_glob, lda, b_glob, ldb, kt)
        if not quiet:
            check(sorted(wa) == list(range(128 * GEMM_BK)), "A stage fill is not a bijection")
            check(sorted(wb) == list(range(GEMM_BK * 128)), "B stage fill is not a bijection")
        for wg in range(2):
            for kk in range(GEMM_BK // 16):
                # every thread of the warpgroup must pass the same descriptors (.sync.aligned)
                descs = {(descs_fn or gemm_stage_descs)(wg * 128 + t, sa, sb, kk) for t in range(128)}
                if not quiet:
                    check(len(descs) == 1, "threads of warpgroup %d pass different descriptors" % wg)
                da, db = next(iter(descs))
                for mm in range(64):
                    for k in range(16):
                        want = ("A", wg * 64 + mm, kt * GEMM_BK + kk * 16 + k)
                        got = hw_read(smem, da, "K" if ta_ == 0 else "MN", mm, k, swizzle_origin)
                        if got != want:
                            bad += 1
                            if not quiet:
                                check(False, "stage %d wg %d kk %d: A[%d][%d] reads %s, want %s"
                                      % (s, wg, kk, mm, k, got, want))
                for k in range(16):
                    for n in range(128):
                        want = ("B", kt * GEMM_BK + kk * 16 + k, n)
                        got = hw_read(smem, db, "MN" if tb_ == 1 else "K", n, k, swizzle_origin)
                        if got != want:
                            bad += 1
                            if not quiet:
                                check(False, "stage %d wg %d kk %d: B[%d][%d] reads %s, want %s"
                                      % (s, wg, kk, k, n, got, want))
    return bad


# Static __shared__ placement is up to the toolchain; try aligned bases (sa before sb, sb before sa, gaps).
ALIGNED_BASES = [(0, 3 * STAGE_BYTES), (3 * STAGE_BYTES, 0), (1024, 1024 + 3 * STAGE_BYTES + 2048),
                 (0x8000 + 4096, 0x1000)]
n_reads = 0
for sa0, sb0 in ALIGNED_BASES:
    bad = check_reads(sa0, sb0)
    n_reads += 1
    if VERBOSE:
        print("bases sa=%#x sb=%#x: %d wrong elements" % (sa0, sb0, bad))
print("operand reads: %d base placements x 3 stages x 2 warpgroups x 2 k-steps, A 64x16 + B 16x128 each: %s"
      % (len(ALIGNED_BASES), "all elements correct" if not failures else "MISMATCHES"))

# Sensitivity (informational, does not fail): what the same code would read with a misaligned stage base, or if
# the swizzle were applied relative to the descriptor start instead of to the absolute address.
info = []
for align in (16, 128, 256, 512):
    info.append("base %% 1024 = %d: %d wrong" % (align, check_reads(align, 3 * STAGE_BYTES + align, quiet=True)))
info.append("swizzle relative to descriptor start: %d wrong"
            % check_reads(0, 3 * STAGE_BYTES, swizzle_origin="start", quiet=True))
print("  (informational, of %d reads per placement) " % (GEMM_STAGES * 2 * 2 * (64 * 16 + 16 * 128)) + "; ".join(info))

# Model self-test against the PTX ISA's own worked example (Figure 170, "MN-Major, 64B swizzling and bf16 type":
# exact layout Swizzle<2,4,3> o ((8,4,2),(8,2)):((1,8,256),(32,512)) elements, LBO = 256*2 B, SBO = 512*2 B) and
# CuTe's Layout_K_SW64_Atom_Bits (Swizzle<2,4,3> o (8,512):(512,1) bits: 8 rows of 64 bytes).
for n in range(64):
    for k in range(16):
        n0, n1, n2, k0, k1 = n % 8, (n // 8) % 4, n // 32, k % 8, k // 8
        check(canonical_offset("MN", n, k, 512, 1024, 2) == 2 * (n0 + 8 * n1 + 256 * n2 + 32 * k0 + 512 * k1),
              "model != PTX Figure 170 example at n=%d k=%d" % (n, k))
for r in range(8):
    for k in range(16):
        check(canonical_offset("K", r, k, 16, 512, 2) == (r * 512 + k * 16) // 8, "model != Layout_K_SW64_Atom")

# Mutation test: the model must reject plausible wrong variants (otherwise it proves nothing).
def mutant(a_lbo=16, a_sbo=512, b_lbo=2048, b_sbo=512, a_step=16, b_step=16 * 32):
    def f(tid, ta_base, tb_base, kk):
        ta = ta_base + (tid // 128) * 64 * GEMM_BK * ELEM
        return (wgmma_desc(ta + kk * a_step * ELEM, a_lbo, a_sbo), wgmma_desc(tb_base + kk * b_step * ELEM, b_lbo, b_sbo))
    return f
MUTANTS = {"B LBO/SBO swapped": dict(descs_fn=mutant(b_lbo=512, b_sbo=2048)),
           "A SBO 1024": dict(descs_fn=mutant(a_sbo=1024)),
           "B k-step 16 rows as 16 elements": dict(descs_fn=mutant(b_step=16)),
           "imm-trans-b = 0": dict(trans=(0, 0)),
           "imm-trans-a = 1": dict(trans=(1, 1))}
undetected = [name for name, kw in MUTANTS.items() if check_reads(0, 3 * STAGE_BYTES, quiet=True, **kw) == 0]
check(not undetected, "the model does not detect these wrong variants: %s" % undetected)
print("model self-tests: PTX Fig. 170 / Layout_K_SW64_Atom offsets reproduced; %d/%d wrong descriptor variants "
      "detected" % (len(MUTANTS) - len(undetected), len(MUTANTS)))
acc_mut = sum(gemmtile_row_col(tid, i) != ((tid // 32 // 4) * 64 + ((i // 4) // 4) * 16 + (tid % 32) // 4 +
              (8 if i % 4 >= 2 else 0), (tid // 32 % 4) * 32 + ((i // 4) % 4) * 8 + (tid % 32 % 4) * 2 + (i & 1))
              for tid in range(256) for i in range(64))
check(acc_mut > 0, "GemmTile warpgroups mapping indistinguishable from the mma.sync one")

# ---------------------------------------------------------------- 3: accumulator mapping
acc_bad = 0
for tid in range(256):
    wg, t = tid // 128, tid % 128
    for i in range(64):
        v = OPERAND_OF_SLOT.get(gemmtile_value_slot(i))  # which wgmma register value(i) reads
        if v is None:
            check(False, "GemmTile::value(%d) reads a slot that is no asm operand" % i)
            acc_bad += 1
            continue
        r, c = wgmma_d_row_col(t, v)
        # PTX Figure 149 restated: row = 16*warp + lane/4 + 8*((v>>1)&1), col = 8*(v>>2) + 2*(lane%4) + (v&1)
        w, lane = t // 32, t % 32
        check((r, c) == (16 * w + lane // 4 + 8 * ((v >> 1) & 1), 8 * (v >> 2) + 2 * (lane % 4) + (v & 1)),
              "CLayout_64xN and the figure-149 formula disagree at t=%d v=%d" % (t, v))
        if not check(gemmtile_row_col(tid, i) == (wg * 64 + r, c),
                     "thread %d value %d: GemmTile says %s, wgmma puts d%d at %s"
                     % (tid, i, gemmtile_row_col(tid, i), v, (wg * 64 + r, c))):
            acc_bad += 1
cover = sorted(gemmtile_row_col(tid, i) for tid in range(256) for i in range(64))
check(cover == [(r, c) for r in range(128) for c in range(128)], "GemmTile row/col does not cover the tile once")
print("accumulator: 256 threads x 64 registers, GemmTile::row/col vs wgmma m64n128k16 D layout: %s"
      % ("all match" if acc_bad == 0 else "%d mismatches" % acc_bad))


# ---------------------------------------------------------------- 4: end to end, pipelined, integers
def end_to_end(K=4 * GEMM_BK, lda=4 * GEMM_BK + 16, ldb=200, col0=24, seed=1):
    rnd = random.Random(seed)
    a = [rnd.randint(-8, 8) for _ in range(128 * lda)]
    bfull = [rnd.randint(-8, 8) for _ in range(K * ldb)]
    b = bfull[col0:]
    sa0, sb0 = 0, 3 * STAGE_BYTES
    stages = [dict() for _ in range(GEMM_STAGES)]  # one dict per stage (cp.async targets differ per stage)
    regs = [[0] * 64 for _ in range(256)]  # regs[tid][d-register]
    ktiles = K // GEMM_BK

    def load(s, kt):
        stages[s].clear()
        gemm_load_stage(stages[s], sa0 + s * STAGE_BYTES, sb0 + s * STAGE_BYTES, a, lda, b, ldb, kt)

    for s in range(GEMM_STAGES - 1):
        if s < ktiles:
            load(s, s)
    for kt in range(ktiles):
        nxt = kt + GEMM_STAGES - 1
        if nxt < ktiles:
            check(nxt % GEMM_STAGES != kt % GEMM_STAGES, "refilling the stage being multiplied")
            load(nxt % GEMM_STAGES, nxt)
        s = kt % GEMM_STAGES
        sa, sb = sa0 + s * STAGE_BYTES, sb0 + s * STAGE_BYTES
        for wg in range(2):
            for kk in range(GEMM_BK // 16):
                da, db = gemm_stage_descs(wg * 128, sa, sb, kk)
                A = [[hw_read(stages[s], da, "K" if TRANS_A == 0 else "MN", mm, k) for k in range(16)] for mm in range(64)]
                B = [[hw_read(stages[s], db, "MN" if TRANS_B == 1 else "K", n, k) for n in range(128)] for k in range(16)]
                holes = sum(not isinstance(x, int) for row in A + B for x in row)
                if not check(holes == 0, "end to end: %d reads hit no element (stage %d, wg %d, kk %d)" % (holes, s, wg, kk)):
                    A = [[x if isinstance(x, int) else 0 for x in row] for row in A]
                    B = [[x if isinstance(x, int) else 0 for x in row] for row in B]
                D = [[sum(A[mm][k] * B[k][n] for k in range(16)) for n in range(128)] for mm in range(64)]
                for t in range(128):
                    for v in range(64):
                        r, c = wgmma_d_row_col(t, v)
                        regs[wg * 128 + t][v] += D[r][c]
    out = [[None] * 128 for _ in range(128)]
    for tid in range(256):
        for i in range(64):
            r, c = gemmtile_row_col(tid, i)
            out[r][c] = regs[tid][OPERAND_OF_SLOT[gemmtile_value_slot(i)]]
    ref = [[sum(a[r * lda + k] * bfull[k * ldb + col0 + c] for k in range(K)) for c in range(128)]
           for r in range(128)]
    wrong = sum(out[r][c] != ref[r][c] for r in range(128) for c in range(128))
    check(wrong == 0, "end to end: %d of 16384 tile values differ from A @ B" % wrong)
    return wrong


wrong = end_to_end()
print("end to end (K=128: 4 k-tiles through 3 stages, lda=144, ldb=200, col0=24): %s"
      % ("tile == A @ B" if wrong == 0 else "%d wrong values" % wrong))

if failures:
    print("FAILED: %d mismatches" % len(failures))
    sys.exit(1)
print("OK: wgmma descriptors, stage layouts and accumulator mapping agree with the PTX/CuTe model")
