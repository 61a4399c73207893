#!/usr/bin/env python3
"""CPU model of benches/cuda/gemm_wide.cu, the 128 x 256-tile wgmma experiment of benches/gemm.rs (standard
library only). It reuses scripts/wgmma_layout_model.py's model of the PTX ISA's canonical 64-byte-swizzle layouts,
descriptors and m64nNk16 accumulator layout (that script's own checks run first, quietly), and checks the wide
kernel's own pieces against it:

1. the stage fill (load_stage: A 128 x 32, B 32 x 256 as eight 32-column atoms) is a bijection onto the stage;
2. every element each warpgroup's m64n256k16 reads through the kernel's descriptors, for both k steps of every
   stage, is the operand element it should be (A[64 wg + m][k], B[k][n] for n < 256);
3. the epilogue's (row, col) of each of a thread's 128 registers is the m64n256k16 D layout's;
4. end to end: a 128 x 256 tile over 4 k-tiles through the 3 stages equals A x B.

Exit status 1 on any mismatch, or when a line of gemm_wide.cu this model transcribes has changed (model_guard).
"""
import contextlib
import io
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model_guard import read_transcribed  # noqa: E402

with contextlib.redirect_stdout(io.StringIO()) as quiet:
    try:
        import wgmma_layout_model as base  # noqa: E402  (runs, and must pass, its own checks)
    except SystemExit as stop:
        print(quiet.getvalue())
        print("gemm_wide_model: scripts/wgmma_layout_model.py failed first (exit %s)" % stop.code)
        sys.exit(1)
if base.failures:
    print("gemm_wide_model: scripts/wgmma_layout_model.py reports mismatches")
    sys.exit(1)

SOURCE = os.path.join(HERE, "..", "benches", "cuda", "gemm_wide.cu")
BK, STAGES, ELEM = 32, 3, 2
A_ELEMS, B_ELEMS = 128 * BK, BK * 256
STAGE_ELEMS = A_ELEMS + B_ELEMS
read_transcribed(SOURCE, [
    "constexpr int BK = 32, STAGES = 3;",
    "constexpr int A_ELEMS = 128 * BK, B_ELEMS = BK * 256, STAGE_ELEMS = A_ELEMS + B_ELEMS;",
    "cp_async_16(sa + ar * 32 + ((ac ^ ((ar >> 1) & 3)) * 8), a + ar * lda + kt * BK + ac * 8);",
    "uint32_t br = id / 32, bc = id % 32;",
    "cp_async_16(sb + (bc / 4) * 1024 + br * 32 + (((bc % 4) ^ ((br >> 1) & 3)) * 8),",
    "b + (kt * BK + br) * ldb + bc * 8);",
    "return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |",
    "(uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(2) << 62);",
    "const __nv_bfloat16* sa = stages + (kt % STAGES) * STAGE_ELEMS + warpgroup * 64 * BK;",
    "const __nv_bfloat16* sb = stages + (kt % STAGES) * STAGE_ELEMS + A_ELEMS;",
    "mma_m64n256k16(acc, desc(sa + kk * 16, 16, 512), desc(sb + kk * 16 * 32, 2048, 512));",
    "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 ",
    "\"%128, %129, 1, 1, 1, 0, 1;\"",
    "size_t row = row0 + warpgroup * 64 + warp * 16 + lane / 4;",
    "size_t col = col0 + (lane % 4) * 2;",
    "__floats2bfloat162_rn(acc.d[4 * f], acc.d[4 * f + 1]);",
    "*reinterpret_cast<__nv_bfloat162*>(out + (row + 8) * n + col + f * 8) =",
    "__floats2bfloat162_rn(acc.d[4 * f + 2], acc.d[4 * f + 3]);",
], "benches/cuda/gemm_wide.cu")

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        if len(failures) <= 20:
            print("MISMATCH:", msg)
    return cond


def load_stage(smem, sa_base, sb_base, a_glob, lda, b_glob, ldb, kt):
    """gemm_wide.cu's load_stage: byte address -> element; returns the element offsets written in A and B."""
    wa, wb = [], []
    for tid in range(256):
        for i in range(2):
            id_ = tid + i * 256
            ar, ac = id_ // 4, id_ % 4
            dst, src = ar * 32 + ((ac ^ ((ar >> 1) & 3)) * 8), ar * lda + kt * BK + ac * 8
            for j in range(8):
                smem[sa_base + (dst + j) * ELEM] = a_glob[src + j]
                wa.append(dst + j)
        for i in range(4):
            id_ = tid + i * 256
            br, bc = id_ // 32, id_ % 32
            dst = (bc // 4) * 1024 + br * 32 + (((bc % 4) ^ ((br >> 1) & 3)) * 8)
            src = (kt * BK + br) * ldb + bc * 8
            for j in range(8):
                smem[sb_base + (dst + j) * ELEM] = b_glob[src + j]
                wb.append(dst + j)
    return wa, wb


def descs(stage_base, warpgroup, kk):
    """The kernel's two descriptors for a warpgroup's k step kk of the stage at byte address stage_base."""
    sa = stage_base + warpgroup * 64 * BK * ELEM
    sb = stage_base + A_ELEMS * ELEM
    return base.wgmma_desc(sa + kk * 16 * ELEM, 16, 512), base.wgmma_desc(sb + kk * 16 * 32 * ELEM, 2048, 512)


def epilogue_row_col(tid, v):
    """The epilogue's (row, col) in the 128 x 256 tile of register v of thread tid (acc.d[v])."""
    warpgroup, warp, lane = tid // 128, (tid // 32) % 4, tid % 32
    f, e = v // 4, v % 4
    row = warpgroup * 64 + warp * 16 + lane // 4 + (8 if e >= 2 else 0)
    col = (lane % 4) * 2 + f * 8 + (e & 1)
    return row, col


# 1-2: every stage, both warpgroups, both k steps; stages 1024-byte aligned as the kernel aligns them.
K, lda, ldb = 4 * BK, 4 * BK + 8, 256 + 40
a_glob = [("A", r, c) for r in range(128) for c in range(lda)]
b_glob = [("B", r, c) for r in range(K) for c in range(ldb)]
origin = 0x400 * 7
for kt in range(K // BK):
    s = kt % STAGES
    stage_base = origin + s * STAGE_ELEMS * ELEM
    check(stage_base % 1024 == 0, "stage %d is not 1024-byte aligned" % s)
    smem = {}
    wa, wb = load_stage(smem, stage_base, stage_base + A_ELEMS * ELEM, a_glob, lda, b_glob, ldb, kt)
    check(sorted(wa) == list(range(A_ELEMS)), "A stage fill is not a bijection")
    check(sorted(wb) == list(range(B_ELEMS)), "B stage fill is not a bijection")
    for wg in range(2):
        for kk in range(BK // 16):
            da, db = descs(stage_base, wg, kk)
            for mm in range(64):
                for k in range(16):
                    got = base.hw_read(smem, da, "K", mm, k)
                    check(got == ("A", 64 * wg + mm, kt * BK + kk * 16 + k),
                          "A read kt %d wg %d kk %d (%d, %d): %s" % (kt, wg, kk, mm, k, got))
            for k in range(16):
                for n in range(256):
                    got = base.hw_read(smem, db, "MN", n, k)
                    check(got == ("B", kt * BK + kk * 16 + k, n),
                          "B read kt %d wg %d kk %d (%d, %d): %s" % (kt, wg, kk, k, n, got))
print("operand reads: 4 k-tiles x 2 warpgroups x 2 k steps, A 64x16 + B 16x256 each: %s"
      % ("all correct" if not failures else "%d wrong" % len(failures)))

# 3: the epilogue's mapping against the m64n256k16 D layout.
cover = []
for tid in range(256):
    for v in range(128):
        r, c = base.wgmma_d_row_col(tid % 128, v, n=256)
        want = ((tid // 128) * 64 + r, c)
        got = epilogue_row_col(tid, v)
        check(got == want, "register %d of thread %d: epilogue %s, wgmma D layout %s" % (v, tid, got, want))
        cover.append(got)
check(sorted(cover) == [(r, c) for r in range(128) for c in range(256)], "the epilogue does not cover the tile once")
print("accumulator: 256 threads x 128 registers, epilogue vs wgmma m64n256k16 D layout: %s"
      % ("all match" if not failures else "%d wrong" % len(failures)))

# 4: end to end, small integers (exact).
rnd = random.Random(3)
a = [rnd.randint(-8, 8) for _ in range(128 * lda)]
b = [rnd.randint(-8, 8) for _ in range(K * ldb)]
regs = [[0] * 128 for _ in range(256)]
for kt in range(K // BK):
    stage_base = origin + (kt % STAGES) * STAGE_ELEMS * ELEM
    smem = {}
    load_stage(smem, stage_base, stage_base + A_ELEMS * ELEM, a, lda, b, ldb, kt)
    for wg in range(2):
        for kk in range(BK // 16):
            da, db = descs(stage_base, wg, kk)
            A = [[base.hw_read(smem, da, "K", mm, k) for k in range(16)] for mm in range(64)]
            B = [[base.hw_read(smem, db, "MN", n, k) for n in range(256)] for k in range(16)]
            D = [[sum(A[mm][k] * B[k][n] for k in range(16)) for n in range(256)] for mm in range(64)]
            for t in range(128):
                for v in range(128):
                    r, c = base.wgmma_d_row_col(t, v, n=256)
                    regs[wg * 128 + t][v] += D[r][c]
out = [[None] * 256 for _ in range(128)]
for tid in range(256):
    for v in range(128):
        r, c = epilogue_row_col(tid, v)
        out[r][c] = regs[tid][v]
ref = [[sum(a[r * lda + k] * b[k * ldb + c] for k in range(K)) for c in range(256)] for r in range(128)]
wrong = sum(out[r][c] != ref[r][c] for r in range(128) for c in range(256))
check(wrong == 0, "end to end: %d of %d elements wrong" % (wrong, 128 * 256))
print("end to end (K=128: 4 k-tiles through 3 stages): %s" % ("tile == A @ B" if wrong == 0 else "WRONG"))

if failures:
    print("FAILED: %d mismatches" % len(failures))
    sys.exit(1)
print("OK: the 128 x 256 wgmma experiment's stages, descriptors and epilogue agree with the PTX/CuTe model")
