#!/usr/bin/env python3
"""CPU model of benches/cuda/gemm_tma.cu, the TMA + warp-specialized wgmma experiment of benches/gemm.rs, and of
weft.cuh's GemmTiles (`a.gemm_tiles(&b)`), the same protocol without clusters, whose lines it guards too (standard
library only). It reuses scripts/wgmma_layout_model.py's model of the PTX ISA's canonical swizzled layouts,
descriptors and m64nNk16 accumulator layout (that script's own checks run first, quietly), and checks the kernel's
own pieces:

1. TMA's 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B: in each 128-byte row of a box, the 16-byte chunk index XOR
   the row index mod 8) into 1024-byte-aligned stages is the address swizzle the descriptors assume (CuTe's
   Swizzle<3,4,3> on absolute address bits); the boxes of a stage (A: 64 x 128, B: four 64 x 64) tile it without
   overlap, and the stages and barriers fit the shared memory a block may have (227 KB on sm_90);
2. every element each consumer warpgroup's m64n256k16 reads through the kernel's descriptors, for all four k steps
   of every stage, is the operand element it should be (A[64 c + m][k], B[k][n] for n < 256); the model's 128-byte
   layouts reproduce CuTe's SW128 atoms, and plausible wrong descriptors are caught;
3. the epilogue's (row, col) of each consumer thread's 128 registers is the m64n256k16 D layout's;
4. end to end: a 128 x 256 tile over 2 k-tiles of 64 equals A x B;
5. the pipeline: producer, two consumer warpgroups, TMA completions and wgmma groups as independent agents under
   random schedules, with mbarrier semantics (arrival count, transaction bytes, phase parity): no TMA writes a
   stage whose previous contents an MMA may still read, every MMA reads the k-tile it expects, nothing deadlocks;
   and wrong variants of the protocol (releasing the stage in flight, the producer's first-round parity, an arrival
   count of one warpgroup, no wait before releasing) are caught. The same for the cluster kernel: two CTAs whose
   producers multicast half of B each into both, whose consumers release each stage on both CTAs' barriers; and
   its wrong variants (releasing only one's own stages, no multicast, a count of one CTA, no wait) are caught;
6. the persistent walk: every 128 x 256 tile of the output is computed exactly once, with and without clusters,
   for several shapes and grid sizes, and weft's walk over a matrix sharded over ranks reads each tile's rows from
   one owner;
7. weft's mma.sync loop (the same GemmTiles without wgmma): its producer's cp.async copies write the stage layout
   TMA writes, its ldmatrix addresses (an XOR form) are the swizzle's, its fragments (ldmatrix .x4 and .x4.trans
   into mma.sync m16n8k16) give a 128 x 256 tile equal to A x B, value by value where row(i) and col(i) say;
   gemm_store's pairs follow both loops' layouts; and its pipeline (copying threads whose cp.async arrivals fill a
   stage, consumer warps that release it once read) never reads a stale stage, never overwrites one being read and
   never deadlocks under random schedules, while wrong counts, a wrong first parity and a release before the read
   are caught.

Exit status 1 on any mismatch, or when a line of gemm_tma.cu this model transcribes has changed (model_guard).
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
        print("gemm_tma_model: scripts/wgmma_layout_model.py failed first (exit %s)" % stop.code)
        sys.exit(1)
if base.failures:
    print("gemm_tma_model: scripts/wgmma_layout_model.py reports mismatches")
    sys.exit(1)

SOURCE = os.path.join(HERE, "..", "benches", "cuda", "gemm_tma.cu")
BM, BN, BK, STAGES, CONSUMERS, ELEM = 128, 256, 64, 4, 2, 2
A_BYTES, B_BOX_BYTES, B_BYTES = BM * BK * 2, BK * 64 * 2, BK * BN * 2
STAGE_BYTES = A_BYTES + B_BYTES
SMEM = STAGES * STAGE_BYTES + 1024 + 2 * STAGES * 8
SM90_MAX_SHARED = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin on compute capability 9.0: 227 KB
read_transcribed(SOURCE, [
    "constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CONSUMERS = 2;",
    "constexpr uint32_t A_BYTES = BM * BK * 2, B_BOX_BYTES = BK * 64 * 2, B_BYTES = BK * BN * 2;",
    "constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;",
    "#define GEMM_TMA_SMEM (gemm_tma::STAGES * gemm_tma::STAGE_BYTES + 1024 + 2 * gemm_tma::STAGES * 8)",
    "const uint32_t stages = raw + ((1024 - (raw & 1023)) & 1023);",
    "const uint32_t full = stages + STAGES * STAGE_BYTES, empty = full + STAGES * 8;",
    "barrier_init(full + 8 * s, 1);",
    "barrier_init(empty + 8 * s, CLUSTER * CONSUMERS * 4);",
    "const uint32_t s = it % STAGES, stage = stages + s * STAGE_BYTES;",
    "barrier_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);",
    "barrier_arrive_expect(full + 8 * s, STAGE_BYTES);",
    "tma_load(stage, &map_a, full + 8 * s, int32_t(kt * BK), int32_t(row0));",
    "for (int j = 0; j < BN / 64; ++j) {",
    "tma_load(stage + A_BYTES + j * B_BOX_BYTES, &map_b, full + 8 * s, int32_t(col0 + 64 * j), int32_t(kt * BK));",
    "barrier_wait(full + 8 * s, (it / STAGES) & 1);",
    "mma_m64n256k16(acc, desc(stage + consumer * 64 * 128 + kk * 32, 16, 1024),",
    "desc(stage + A_BYTES + kk * 2048, B_BOX_BYTES, 1024));",
    "return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |",
    "(uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);",
    "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 ",
    "\"%128, %129, 1, 1, 1, 0, 1;\"",
    "asm volatile(\"wgmma.wait_group.sync.aligned 1;\" ::: \"memory\");",
    "if (kt > 0) release((it - 1) % STAGES);",
    "asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");",
    "if (ktiles > 0) release((it - 1) % STAGES);",
    "for (uint32_t r = 0; r < CLUSTER; ++r) barrier_arrive_cluster(empty + 8 * s, r);",
    "barrier_wait_cluster(empty + 8 * s, ((it / STAGES) & 1) ^ 1);",
    "} else if (j % CLUSTER == rank) {",
    "int32_t(kt * BK), uint16_t((1u << CLUSTER) - 1));",
    "const size_t first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;",
    "const size_t tiles_m = m / (CLUSTER * BM), tiles_n = n / BN, tiles = tiles_m * tiles_n, ktiles = k / BK;",
    "tile_origin(t, tiles_m, tiles_n, CLUSTER * BM, row0, col0);",
    "row0 += rank * BM;",
    "for (size_t t = first; t < tiles; t += step) {",
    "size_t rows = tiles_m - first_row < group ? tiles_m - first_row : group;",
    "row0 = (first_row + within % rows) * band;",
    "col0 = (within / rows) * BN;",
    "size_t row = row0 + consumer * 64 + warp * 16 + lane / 4;",
    "size_t col = col0 + (lane % 4) * 2;",
    "__floats2bfloat162_rn(acc.d[4 * f], acc.d[4 * f + 1]);",
    "*reinterpret_cast<__nv_bfloat162*>(out + (row + 8) * n + col + f * 8) =",
    "__floats2bfloat162_rn(acc.d[4 * f + 2], acc.d[4 * f + 3]);",
], "benches/cuda/gemm_tma.cu")
# weft's own loop (weft.cuh, GemmTiles: `a.gemm_tiles(&b)`) is the same protocol without clusters, written with weft's
# names: the lines below are its counterparts of the ones above, so this model covers it too, and a change to either
# that the other does not follow shows here.
read_transcribed(os.path.join(HERE, "..", "device", "cuda", "weft.cuh"), [
    "static constexpr uint32_t BM = 128, BN = 256, BK = 64, STAGES = WEFT_GEMM_TILES_STAGES, THREADS = 384,",
    "static constexpr uint32_t A_BYTES = BM * BK * 2, B_BOX_BYTES = BK * 64 * 2, STAGE_BYTES = A_BYTES + BK * BN * 2;",
    "static constexpr uint32_t SHARED_BYTES = STAGES * STAGE_BYTES + 1024 + 2 * STAGES * 8;",
    "stages_ = raw + ((1024 - (raw & 1023)) & 1023);",
    "full_ = stages_ + STAGES * STAGE_BYTES;",
    "empty_ = full_ + STAGES * 8;",
    "detail::mbar_init(full_ + 8 * s, WEFT_GEMM_TILES_LOOP == 2 ? 1 : 128);",
    "detail::mbar_init(empty_ + 8 * s, 2 * 4);",
    "const uint32_t s = it % STAGES, stage = stages_ + s * STAGE_BYTES;",
    "detail::mbar_wait(empty_ + 8 * s, ((it / STAGES) & 1) ^ 1);",
    "detail::mbar_arrive_expect(full_ + 8 * s, STAGE_BYTES);",
    "const size_t owner = row0 / shard_rows_;",
    "row = row0 - owner * shard_rows_;",
    "const TmaMap* a_map = a_maps_ + shard_of(row0, a_row);",
    "detail::tma_load_2d(stage, a_map, full_ + 8 * s, int32_t(kt * BK), int32_t(a_row));",
    "for (uint32_t j = 0; j < BN / 64; ++j) {",
    "detail::tma_load_2d(stage + A_BYTES + j * B_BOX_BYTES, &b_->map, full_ + 8 * s, int32_t(col0 + 64 * j),",
    "const uint32_t s = it_ % STAGES, stage = stages_ + s * STAGE_BYTES;",
    "detail::mbar_wait(full_ + 8 * s, (it_ / STAGES) & 1);",
    "detail::mma_m64n256k16<T>(d_, detail::smem_matrix_desc(stage + consumer * 64 * 128 + kk * 32, 16, 1024, 1),",
    "detail::smem_matrix_desc(stage + A_BYTES + kk * 2048, B_BOX_BYTES, 1024, 1));",
    "return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |",
    "(uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (layout << 62);",
    "\"1, 1, 1, 0, 1;\"",
    "asm volatile(\"wgmma.wait_group.sync.aligned 1;\" ::: \"memory\");",
    "if (kt > 0) release((it_ - 1) % STAGES);",
    "asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");",
    "release((it_ - 1) % STAGES);",
    "for (size_t t = blockIdx.x; t < tiles_; t += gridDim.x) {",
    "t_ += gridDim.x;",
    "const size_t rows = tiles_m_ - first < group ? tiles_m_ - first : group, within = t % (group * tiles_n_);",
    "size_t band = first + within % rows + first_band_;",
    "if (band >= tiles_m_) band -= tiles_m_;",
    "row0 = band * BM;",
    "col0 = (within / rows) * BN;",
    "first_band_ = size_t(a.rank) * (a.shard_rows() / BM);",
    "row_base_ = (warpgroup_ > 0 ? warpgroup_ - 1 : 0) * 64 + warp_in_group * 16 + lane / 4;",
    "col_base_ = (lane % 4) * 2;",
    "return row_base_ + uint32_t(i / 4 / FRAGMENT_COLS) * 16 + ((i % 4) >= 2 ? 8u : 0u);",
    "return col_base_ + uint32_t(i / 4 % FRAGMENT_COLS) * 8 + uint32_t(i & 1);",
    # gemm_store (store_into): the pairs, and the one-at-a-time fallback.
    "const size_t top = (row0 + row_base_) * ld + col0 + col_base_;",
    "if ((reinterpret_cast<uintptr_t>(base) & 3) == 0 && ld % 2 == 0 && col0 % 2 == 0) {",
    "const size_t at = top + (f / FRAGMENT_COLS) * 16 * ld + (f % FRAGMENT_COLS) * 8;",
    "store_pair(base + at, d_[4 * f], d_[4 * f + 1]);",
    "store_pair(base + at + 8 * ld, d_[4 * f + 2], d_[4 * f + 3]);",
    # The mma.sync loop (WEFT_GEMM_TILES_LOOP 1), section 7 below.
    "static constexpr uint32_t FRAGMENT_COLS = WEFT_GEMM_TILES_LOOP == 1 ? 8 : 32;",
    "row_base_ = (warpgroup_ > 0 ? warpgroup_ - 1 : 0) * 64 + lane / 4;",
    "col_base_ = warp_in_group * 64 + (lane % 4) * 2;",
    "const uint32_t row = threadIdx.x / 8, chunk = threadIdx.x % 8;",
    "const uint32_t first = row * 128 + ((chunk ^ (row % 8)) * 16);",
    "const uint64_t a_rows = 16 * lda_ * sizeof(T), b_rows = 16 * ldb * sizeof(T), b_ktile = BK * ldb * sizeof(T);",
    "((a_row + row) * lda_ + chunk * 8) * sizeof(T);",
    "uint64_t b = b_global + (row * ldb + col0 + chunk * 8) * sizeof(T);",
    "for (size_t kt = 0; kt < ktiles_; ++kt, ++it, a += BK * sizeof(T), b += b_ktile) {",
    "const uint32_t s = it % STAGES, stage = stages_ + s * STAGE_BYTES + first;",
    "for (uint32_t i = 0; i < BM / 16; ++i) detail::cp_async_16_global(stage + i * 2048, a + i * a_rows);",
    "for (uint32_t i = 0; i < BK / 16; ++i) {",
    "for (uint32_t box = 0; box < BN / 64; ++box) {",
    "detail::cp_async_16_global(stage + A_BYTES + box * B_BOX_BYTES + i * 2048,",
    "b + i * b_rows + box * 64 * sizeof(T));",
    "const uint32_t chunk = ((lane / 16) ^ (lane % 8)) * 16;",
    "const uint32_t a_lane = ((warpgroup_ - 1) * 64 + lane % 16) * 128 + chunk;",
    "const uint32_t b_lane = A_BYTES + warp * B_BOX_BYTES + (lane % 16) * 128 + chunk;",
    "for (uint32_t mi = 0; mi < 4; ++mi) detail::ldmatrix_x4_at((a0 ^ (kk * 32)) + mi * 2048, fa[mi], false);",
    "detail::ldmatrix_x4_at((b0 ^ (nj * 32)) + kk * 2048, fb, true);",
    "detail::mma_16816<T>(&d_[4 * (mi * 8 + 2 * nj)], fa[mi], &fb[0]);",
    "detail::mma_16816<T>(&d_[4 * (mi * 8 + 2 * nj + 1)], fa[mi], &fb[2]);",
    "for (uint32_t i = 0; i < PER_THREAD; ++i) base[(row0 + row(i)) * ld + col0 + col(i)] = from_f32<T>(d_[i]);",
], "device/cuda/weft.cuh (GemmTiles)")

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        if len(failures) <= 20:
            print("MISMATCH:", msg)
    return cond


# ---------------------------------------------------------------- 1: TMA boxes and the stage layout
def tma_box(smem, dst, element, c0, c1, box_inner, box_outer):
    """TMA tile mode with CU_TENSOR_MAP_SWIZZLE_128B, 2-byte elements: element (c1 + r, c0 + c) of the tensor to
    dst + 128 r + 2 c with its 16-byte chunk index XOR (r mod 8). Returns the byte offsets written."""
    check(box_inner * ELEM == 128, "a 128-byte-swizzle box row is %d bytes, not 128" % (box_inner * ELEM))
    written = []
    for r in range(box_outer):
        for c in range(box_inner):
            off = c * ELEM
            chunk = off // 16
            at = dst + r * 128 + ((chunk ^ (r % 8)) * 16) + off % 16
            smem[at] = element(c1 + r, c0 + c)
            written.append(at - dst)
    return written


def load_stage(smem, stage, a, b, row0, col0, kt):
    """The producer's five boxes for k-tile kt of the tile at (row0, col0): A {64, 128} at the stage, B's four
    {64, 64} boxes after it. a(row, col) and b(row, col) give the tensors' elements."""
    wa = tma_box(smem, stage, a, kt * BK, row0, 64, 128)
    wb = []
    for j in range(BN // 64):
        wb += [A_BYTES + j * B_BOX_BYTES + o
               for o in tma_box(smem, stage + A_BYTES + j * B_BOX_BYTES, b, col0 + 64 * j, kt * BK, 64, 64)]
    return wa, wb


check(SMEM <= SM90_MAX_SHARED, "GEMM_TMA_SMEM = %d bytes, more than a block may have (%d)" % (SMEM, SM90_MAX_SHARED))
for raw in (0, 16, 400, 1008, 1024, 5000):  # wherever the toolchain puts the dynamic window
    stages = raw + ((1024 - (raw & 1023)) & 1023)
    check(stages % 1024 == 0 and stages - raw < 1024, "raw %d: stages at %d" % (raw, stages))
    check(stages + STAGES * STAGE_BYTES + 2 * STAGES * 8 <= raw + SMEM, "raw %d: barriers past the window" % raw)
smem = {}
wa, wb = load_stage(smem, 4096, lambda r, c: ("A", r, c), lambda r, c: ("B", r, c), 0, 0, 0)
check(sorted(wa) == [2 * i for i in range(A_BYTES // 2)], "the A box does not tile its 16 KB")
check(sorted(wb) == [A_BYTES + 2 * i for i in range(B_BYTES // 2)], "B's boxes do not tile their 32 KB")
# The chunk XOR above is CuTe's Swizzle<3,4,3> on the absolute address when the box starts 1024-byte aligned.
for dst in (0, 1024 * 5):
    for r in range(16):
        for c in range(64):
            off = c * ELEM
            check(dst + r * 128 + (((off // 16) ^ (r % 8)) * 16) + off % 16 == base.swizzle_abs(dst + r * 128 + off, 1),
                  "TMA's chunk XOR and the descriptors' address swizzle differ at row %d col %d" % (r, c))
print("stages: %d x %d KB + barriers = %d bytes of dynamic shared memory (of %d); TMA boxes tile each stage; "
      "TMA's 128-byte swizzle = the descriptors' address swizzle" % (STAGES, STAGE_BYTES // 1024, SMEM,
                                                                    SM90_MAX_SHARED))


# ---------------------------------------------------------------- 2: descriptors and what the MMAs read
def desc(address, leading_bytes, stride_bytes, layout=1):
    return (((address & 0x3FFFF) >> 4) | (((leading_bytes >> 4) & 0x3FFF) << 16) |
            (((stride_bytes >> 4) & 0x3FFF) << 32) | (layout << 62))


def kernel_descs(stage, consumer, kk, a_step=32, b_step=2048, a_sbo=1024, b_lbo=B_BOX_BYTES, b_sbo=1024, layout=1):
    """gemm_tma.cu's two descriptors for consumer warpgroup `consumer`, k step kk (the defaults are the kernel's;
    the arguments make the wrong variants the model must catch)."""
    return (desc(stage + consumer * 64 * 128 + kk * a_step, 16, a_sbo, layout),
            desc(stage + A_BYTES + kk * b_step, b_lbo, b_sbo, layout))


def hw_read(smem, d, major, mn, k):
    """The element the hardware reads for (mn, k) of a 16-bit operand through descriptor d (any swizzle)."""
    f = base.decode_desc(d)
    if f["layout"] not in base.SWIZZLE_BYTES or f["base_offset"] != 0:
        return ("bad descriptor", f["layout"], f["base_offset"])
    off = base.canonical_offset(major, mn, k, f["lbo"], f["sbo"], f["layout"])
    return smem.get(base.swizzle_abs(f["start"] + off, f["layout"]), ("hole",))


# The model's 128-byte layouts are CuTe's atoms: Layout_K_SW128_Atom (8 rows of 64 elements, 128 bytes apart) and
# Layout_MN_SW128_Atom (64 elements along MN, 8 along K, 128 bytes apart).
for r in range(8):
    for k in range(16):
        check(base.canonical_offset("K", r, k, 16, 1024, 1) == r * 128 + 2 * k, "model != Layout_K_SW128_Atom")
for mn in range(64):
    for k in range(8):
        check(base.canonical_offset("MN", mn, k, 8192, 1024, 1) == 2 * (mn + 64 * k), "model != Layout_MN_SW128_Atom")


def check_reads(quiet=False, **variant):
    """Fill each stage with k-tile (s + 1) % 3 of a tile at (row0, col0) and check every element every MMA
    reads. Returns the number of wrong elements."""
    bad, origin, row0, col0 = 0, 1024 * 3, 128, 512
    for s in range(STAGES):
        stage, kt = origin + s * STAGE_BYTES, (s + 1) % 3
        smem = {}
        load_stage(smem, stage, lambda r, c: ("A", r, c), lambda r, c: ("B", r, c), row0, col0, kt)
        for consumer in range(CONSUMERS):
            for kk in range(BK // 16):
                da, db = kernel_descs(stage, consumer, kk, **variant)
                for mm in range(64):
                    for k in range(16):
                        want = ("A", row0 + 64 * consumer + mm, kt * BK + kk * 16 + k)
                        got = hw_read(smem, da, "K", mm, k)
                        if got != want:
                            bad += 1
                            if not quiet:
                                check(False, "stage %d consumer %d kk %d: A[%d][%d] reads %s, want %s"
                                      % (s, consumer, kk, mm, k, got, want))
                for k in range(16):
                    for nn in range(256):
                        want = ("B", kt * BK + kk * 16 + k, col0 + nn)
                        got = hw_read(smem, db, "MN", nn, k)
                        if got != want:
                            bad += 1
                            if not quiet:
                                check(False, "stage %d consumer %d kk %d: B[%d][%d] reads %s, want %s"
                                      % (s, consumer, kk, k, nn, got, want))
    return bad


check_reads()
print("operand reads: 4 stages x 2 consumers x 4 k steps, A 64x16 + B 16x256 each: %s"
      % ("all correct" if not failures else "%d wrong" % len(failures)))
MUTANTS = {"B LBO/SBO swapped": dict(b_lbo=1024, b_sbo=B_BOX_BYTES), "A SBO 512": dict(a_sbo=512),
           "A k step 16 bytes": dict(a_step=16), "B k step 1024 bytes": dict(b_step=1024),
           "64-byte swizzle": dict(layout=2)}
undetected = [name for name, kw in MUTANTS.items() if check_reads(quiet=True, **kw) == 0]
check(not undetected, "the model does not detect these wrong descriptors: %s" % undetected)
print("wrong descriptors detected: %d of %d" % (len(MUTANTS) - len(undetected), len(MUTANTS)))


# ---------------------------------------------------------------- 3: the epilogue
def epilogue_row_col(tid, v):
    """The epilogue's (row, col) in the 128 x 256 tile of register v of consumer thread tid (128..383)."""
    consumer, warp, lane = tid // 128 - 1, (tid // 32) % 4, tid % 32
    f, e = v // 4, v % 4
    return consumer * 64 + warp * 16 + lane // 4 + (8 if e >= 2 else 0), (lane % 4) * 2 + f * 8 + (e & 1)


cover = []
for tid in range(128, 128 * (CONSUMERS + 1)):
    for v in range(128):
        r, c = base.wgmma_d_row_col(tid % 128, v, n=256)
        got = epilogue_row_col(tid, v)
        check(got == ((tid // 128 - 1) * 64 + r, c), "register %d of thread %d: epilogue %s, D layout %s"
              % (v, tid, got, ((tid // 128 - 1) * 64 + r, c)))
        cover.append(got)
check(sorted(cover) == [(r, c) for r in range(128) for c in range(256)], "the epilogue does not cover the tile once")
print("accumulator: 256 consumer threads x 128 registers vs the m64n256k16 D layout: %s"
      % ("all match" if not failures else "%d wrong" % len(failures)))

# gemm_store writes value v of a thread where the epilogue's (row(v), col(v)) says, at rows row0.. and columns col0..
# of a matrix with ld elements per row: the pairs (values 4f, 4f + 1 at top + 8f; 4f + 2, 4f + 3 at bottom + 8f) as
# the fallback does through row() and col(); every pair starts at an even index when ld and col0 are even (so a
# 4-byte store is aligned).
for ld, row0_s, col0_s in [(256, 0, 0), (768, 128, 512), (1280, 384, 256)]:
    written = {}
    for tid in range(128, 128 * (CONSUMERS + 1)):
        consumer, warp, lane = tid // 128 - 1, (tid // 32) % 4, tid % 32
        row_base, col_base = consumer * 64 + warp * 16 + lane // 4, (lane % 4) * 2
        top = (row0_s + row_base) * ld + col0_s + col_base
        bottom = top + 8 * ld
        for f in range(32):
            check(top % 2 == 0 and bottom % 2 == 0, "gemm_store: an odd pair start")
            for index, v in [(top + 8 * f, 4 * f), (top + 8 * f + 1, 4 * f + 1), (bottom + 8 * f, 4 * f + 2),
                             (bottom + 8 * f + 1, 4 * f + 3)]:
                r, c = epilogue_row_col(tid, v)
                check(index == (row0_s + r) * ld + col0_s + c, "gemm_store: value %d of thread %d at %d, epilogue %d"
                      % (v, tid, index, (row0_s + r) * ld + col0_s + c))
                written[index] = written.get(index, 0) + 1
    expected = {(row0_s + r) * ld + col0_s + c for r in range(128) for c in range(256)}
    check(set(written) == expected and all(n == 1 for n in written.values()),
          "gemm_store does not write the tile once (ld %d)" % ld)
print("gemm_store: the pairs write the tile once, where the epilogue's indices say: %s"
      % ("yes" if not failures else "NO"))

# ---------------------------------------------------------------- 4: end to end, small integers (exact)
rnd = random.Random(5)
K, M_ALL, N_ALL, row0, col0 = 2 * BK, 256, 512, 128, 256
a_int = [[rnd.randint(-8, 8) for _ in range(K)] for _ in range(M_ALL)]
b_int = [[rnd.randint(-8, 8) for _ in range(N_ALL)] for _ in range(K)]
regs = [[0] * 128 for _ in range(128 * CONSUMERS)]
for kt in range(K // BK):
    stage = 1024 * (kt + 2) + kt * STAGE_BYTES
    smem = {}
    load_stage(smem, stage, lambda r, c: a_int[r][c], lambda r, c: b_int[r][c], row0, col0, kt)
    for consumer in range(CONSUMERS):
        for kk in range(BK // 16):
            da, db = kernel_descs(stage, consumer, kk)
            A = [[hw_read(smem, da, "K", mm, k) for k in range(16)] for mm in range(64)]
            B = [[hw_read(smem, db, "MN", nn, k) for nn in range(256)] for k in range(16)]
            D = [[sum(A[mm][k] * B[k][nn] for k in range(16)) for nn in range(256)] for mm in range(64)]
            for t in range(128):
                for v in range(128):
                    r, c = base.wgmma_d_row_col(t, v, n=256)
                    regs[consumer * 128 + t][v] += D[r][c]
out = {}
for tid in range(128, 128 * (CONSUMERS + 1)):
    for v in range(128):
        out[epilogue_row_col(tid, v)] = regs[tid - 128][v]
wrong = sum(out[(r, c)] != sum(a_int[row0 + r][k] * b_int[k][col0 + c] for k in range(K))
            for r in range(128) for c in range(256))
check(wrong == 0, "end to end: %d of %d elements wrong" % (wrong, 128 * 256))
print("end to end (2 k-tiles of 64): %s" % ("tile == A @ B" if wrong == 0 else "WRONG"))


# ---------------------------------------------------------------- 5: the pipeline under random schedules
class Barrier:
    """An mbarrier: a phase completes when its pending arrivals and its transaction bytes both reach zero;
    try_wait.parity(p) succeeds once the phase with parity p has completed, i.e. while the current phase's parity
    is not p (a fresh barrier is in phase 0, so waiting for parity 1 succeeds at once)."""

    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def arrive(self, n=1, expect=0):
        self.tx += expect
        self.pending -= n
        if self.pending < 0:
            return False  # more arrivals than the phase counts: undefined behaviour
        self._complete()
        return True

    def complete_tx(self, n):
        self.tx -= n
        self._complete()

    def done(self, parity):
        return (self.phase & 1) != parity


def simulate(tiles, ktiles, seed, cluster=1, release_current=False, producer_parity_xor=1, empty_count=None,
             wait_depth=1, release_peers=True, multicast=True,
             stages=STAGES):
    """The pipeline of one block, or of the `cluster` CTAs of one cluster: 'ok', or what went wrong. Agents: each
    CTA's producer thread, each consumer warpgroup (its 4 warps arrive together), each TMA write in flight (a
    multicast box is one write per CTA it reaches, each completing bytes on that CTA's barrier), each consumer's
    oldest wgmma group (groups complete in order, at any time after they are issued). A scheduler picks any agent
    that can move. The keyword arguments make the wrong variants the model must catch."""
    rnd = random.Random(seed)
    if empty_count is None:
        empty_count = cluster * CONSUMERS * 4
    ctas = range(cluster)
    full = [[Barrier(1) for _ in range(stages)] for _ in ctas]
    empty = [[Barrier(empty_count) for _ in range(stages)] for _ in ctas]
    boxes = [[[None] * 5 for _ in range(stages)] for _ in ctas]  # per CTA and stage: the (tile, kt) of its 5 boxes
    work = [(t, kt) for t in range(tiles) for kt in range(ktiles)]  # the same walk in every CTA of a cluster
    producers = [{"i": 0, "step": "wait"} for _ in ctas]
    consumers = [[{"i": 0, "step": "wait", "groups": []} for _ in range(CONSUMERS)] for _ in ctas]
    tma = []  # (destination CTA, stage, box, (tile, kt)) in flight

    def release(r, c, s):  # the 4 warps of consumer c of CTA r hand stage s back
        for dst in (ctas if release_peers else [r]):
            if not empty[dst][s].arrive(4):
                return "consumer %d of CTA %d arrived too often on empty[%d] of CTA %d" % (c, r, s, dst)
        return None

    def producer_ready(r):
        me = producers[r]
        it = me["i"]
        if it >= len(work):
            return False
        return me["step"] == "issue" or empty[r][it % stages].done(((it // stages) & 1) ^ producer_parity_xor)

    def consumer_ready(r, me):
        it = me["i"]
        if me["step"] == "wait":
            return full[r][it % stages].done((it // stages) & 1)
        if me["step"] == "drain":
            return len(me["groups"]) <= wait_depth
        return me["step"] == "tile_end" and not me["groups"]

    while True:  # only moves that change the state: no move left with work unfinished is a deadlock
        moves = [("producer", r) for r in ctas if producer_ready(r)]
        for r in ctas:
            for c in range(CONSUMERS):
                if consumer_ready(r, consumers[r][c]):
                    moves.append(("consumer", r, c))
                if consumers[r][c]["groups"]:
                    moves.append(("retire", r, c))
        moves += [("tma", i) for i in range(len(tma))]
        if not moves:
            break
        move = rnd.choice(moves)
        if move[0] == "producer":
            r = move[1]
            me = producers[r]
            it = me["i"]
            s = it % stages
            if me["step"] == "wait":  # barrier_wait(empty + 8 * s, ((it / stages) & 1) ^ 1)
                me["step"] = "issue"
            else:  # barrier_arrive_expect, A to this CTA, this CTA's share of B's boxes (multicast with a cluster)
                full[r][s].arrive(expect=STAGE_BYTES)
                tma.append((r, s, 0, work[it]))
                for j in range(BN // 64):
                    if cluster == 1:
                        tma.append((r, s, 1 + j, work[it]))
                    elif j % cluster == r:
                        tma += [(dst, s, 1 + j, work[it]) for dst in (ctas if multicast else [r])]
                me.update(i=it + 1, step="wait")
        elif move[0] == "tma":
            r, s, j, tag = tma.pop(move[1])
            busy = [c for c in range(CONSUMERS) if s in consumers[r][c]["groups"]]
            if busy:
                return "TMA overwrote stage %d of CTA %d while MMAs of consumers %s read it" % (s, r, busy)
            boxes[r][s][j] = tag
            full[r][s].complete_tx(A_BYTES if j == 0 else B_BOX_BYTES)
        elif move[0] == "retire":
            consumers[move[1]][move[2]]["groups"].pop(0)
        else:
            r, c = move[1], move[2]
            me = consumers[r][c]
            it = me["i"]
            s, (tile, kt) = (it % stages, work[it]) if it < len(work) else (None, (None, None))
            if me["step"] == "wait":  # barrier_wait(full + 8 * s, (it / stages) & 1), then the stage's MMAs
                if any(box != (tile, kt) for box in boxes[r][s]):
                    return "consumer %d of CTA %d read stage %d holding %s, wanted %s" % (c, r, s, boxes[r][s],
                                                                                          (tile, kt))
                me["groups"].append(s)
                me["step"] = "drain"
            elif me["step"] == "drain":  # wgmma.wait_group 1, then hand back the previous stage
                back = s if release_current else (it - 1) % stages if kt > 0 else None
                error = back is not None and release(r, c, back)
                if error:
                    return error
                me.update(i=it + 1, step="tile_end" if kt == ktiles - 1 else "wait")
            else:  # wgmma.wait_group 0, then hand back the last stage
                error = release(r, c, (it - 1) % stages)
                if error:
                    return error
                me["step"] = "finished" if it == len(work) else "wait"
    unfinished = any(p["i"] < len(work) for p in producers) or tma or \
        any(c["step"] != "finished" for cs in consumers for c in cs)
    return "deadlock" if unfinished else "ok"


SHAPES = [(1, 1), (1, 3), (1, 4), (1, 5), (2, 3), (3, 4), (2, 9), (3, 1)]
for cluster in (1, 2):
    bad_runs = [(shape, seed, r) for shape in SHAPES for seed in range(40)
                for r in [simulate(shape[0], shape[1], seed, cluster=cluster)] if r != "ok"]
    check(not bad_runs, "the pipeline (cluster of %d) fails: %s" % (cluster, bad_runs[:3]))
    print("pipeline, %s: %d random schedules (tiles x k-tiles in %s): %s"
          % ("one CTA" if cluster == 1 else "a cluster of 2 CTAs sharing B", len(SHAPES) * 40, SHAPES,
             "no race, no stale read, no deadlock" if not bad_runs else "FAILS"))
# weft's GemmTiles pipes through as many stages as the GPU holds (WEFT_GEMM_TILES_STAGES: 3 on an A100, 2 on 99 KB).
for stages in (2, 3):
    bad_runs = [(shape, seed, r) for shape in SHAPES for seed in range(40)
                for r in [simulate(shape[0], shape[1], seed, stages=stages)] if r != "ok"]
    check(not bad_runs, "the pipeline (one CTA, %d stages) fails: %s" % (stages, bad_runs[:3]))
print("pipeline, one CTA on 2 and 3 stages: %d random schedules each: %s"
      % (len(SHAPES) * 40, "no race, no stale read, no deadlock" if not bad_runs else "FAILS"))
PROTOCOL_MUTANTS = {"release the stage just issued": dict(release_current=True),
                    "producer waits parity 0 first": dict(producer_parity_xor=0),
                    "empty counts one warpgroup": dict(empty_count=4),
                    "release without waiting (wait_group 2)": dict(wait_depth=2),
                    "cluster: each CTA releases its own stages only": dict(cluster=2, release_peers=False,
                                                                           empty_count=CONSUMERS * 4),
                    "cluster: B's boxes not multicast": dict(cluster=2, multicast=False),
                    "cluster: empty counts one CTA": dict(cluster=2, empty_count=CONSUMERS * 4),
                    "cluster: release without waiting": dict(cluster=2, wait_depth=2)}
caught = {name: sum(simulate(t, k, seed, **kw) != "ok" for (t, k) in SHAPES for seed in range(40))
          for name, kw in PROTOCOL_MUTANTS.items()}
check(all(caught.values()), "the pipeline model misses wrong protocols: %s"
      % [name for name, n in caught.items() if n == 0])
print("wrong protocols caught: %s" % ", ".join("%s (%d runs)" % (name, n) for name, n in caught.items()))


# ---------------------------------------------------------------- 6: the persistent walk over the tiles
def tile_origin(t, tiles_m, tiles_n, band):
    group = 8
    first_row = (t // (group * tiles_n)) * group
    rows = min(tiles_m - first_row, group)
    within = t % (group * tiles_n)
    return (first_row + within % rows) * band, (within // rows) * BN


def walk(m, n, grid, cluster):
    """The (row0, col0) of every tile each block of `grid` computes, as the kernel's loops give them."""
    tiles_m, tiles_n = m // (cluster * BM), n // BN
    out = []
    for block in range(grid):
        rank, first, step = block % cluster, block // cluster, grid // cluster
        for t in range(first, tiles_m * tiles_n, step):
            row0, col0 = tile_origin(t, tiles_m, tiles_n, cluster * BM)
            out.append((row0 + rank * BM, col0))
    return out


bad_walks = []
for cluster in (1, 2):
    for m, n in [(256, 256), (1024, 512), (4096, 4096), (2304, 1280), (16384, 8192)]:
        want = sorted((r, c) for r in range(0, m, BM) for c in range(0, n, BN))
        for grid in [g for g in (1, 2, 3, 7, 8, 64, 132) if g % cluster == 0]:
            if sorted(walk(m, n, grid, cluster)) != want:
                bad_walks.append((cluster, m, n, grid))
check(not bad_walks, "the persistent walk misses or repeats tiles: %s" % bad_walks[:3])
print("persistent walk (one CTA and clusters of 2, 5 shapes, grids of 1 to 132 blocks): every tile exactly once")


# weft's loop over a TmaShards (an all-gather + GEMM): the bands rotated to start at this rank's shard
# (first_band_), and each tile's A box read through its owner's map at the row within that shard.
def shard_walk(m, n, grid, ranks, rank):
    tiles_m, tiles_n = m // BM, n // BN
    shard_rows = m // ranks
    first_band = rank * (shard_rows // BM)
    out = []
    for block in range(grid):
        for t in range(block, tiles_m * tiles_n, grid):
            row0, col0 = tile_origin(t, tiles_m, tiles_n, BM)
            band = row0 // BM + first_band
            if band >= tiles_m:
                band -= tiles_m
            row0 = band * BM
            owner = row0 // shard_rows
            a_row = row0 - owner * shard_rows
            # The box's 128 rows lie inside the owner's shard (its map's extent): no zero fill, no other rank's rows.
            check(0 <= owner < ranks and 0 <= a_row and a_row + BM <= shard_rows,
                  "m %d, %d ranks, rank %d: tile at row %d reads rows %d.. of rank %d's %d"
                  % (m, ranks, rank, row0, a_row, owner, shard_rows))
            out.append((row0, col0, block))
    return out


bad_shard_walks = []
for ranks in (1, 2, 4, 8):
    for m, n in [(1024, 256), (4096, 1024), (8192, 2048), (2048 * ranks, 512)]:
        if (m // ranks) % BM:
            continue
        want = sorted((r, c) for r in range(0, m, BM) for c in range(0, n, BN))
        for grid in (1, 3, 12, 29, 62, 132):
            for rank in range(ranks):
                got = shard_walk(m, n, grid, ranks, rank)
                if sorted((r, c) for r, c, _ in got) != want:
                    bad_shard_walks.append((ranks, rank, m, n, grid))
                # Block 0's first tile is in this rank's own shard: the ranks start on different peers.
                first = [r for r, _, b in got if b == 0][0]
                if first // (m // ranks) != rank:
                    bad_shard_walks.append(("first tile", ranks, rank, m, n, grid))
check(not bad_shard_walks, "the sharded walk misses, repeats or starts elsewhere: %s" % bad_shard_walks[:3])
print("sharded walk (1 to 8 ranks, 4 shapes, grids of 1 to 132): every tile once, each box inside its owner's shard, "
      "each rank's first tile its own")



# ---------------------------------------------------------------- 7: the mma.sync loop (weft.cuh, WEFT_GEMM_TILES_LOOP 1)
# Its producer warpgroup copies with cp.async into the stage layout TMA writes, and its consumer warps read 64 x 64
# squares with ldmatrix and multiply with mma.sync m16n8k16. PTX ISA: ldmatrix .x4 takes the row addresses of
# matrix q from lanes 8q..8q+7, and lane l receives in register q elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4)
# + 1) of matrix q, or with .trans those of the transposed matrix: (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4).
# mma m16n8k16: A a0 (g, 2t..), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..); B b0 (k 2t.., n g),
# b1 (k 2t + 8.., n g); C c0, c1 (g, 2t..), c2, c3 (g + 8, 2t..), with g = l / 4, t = l % 4.
def mma_sync_copies(smem, stage, a, b, col0, kt):
    """The producer's copies of k-tile kt (a, b: element functions of the whole matrices; A rows from 0), addressed
    as weft.cuh's produce_copies does: thread p copies chunk p % 8 of rows p / 8 + 16 i, so its swizzled chunk is the
    same in every row (each row's % 8 is (p / 8) % 8) and its shared addresses are its first one plus multiples of
    2048 (16 rows of 128 bytes) and of B_BOX_BYTES (one box of 64 columns further)."""
    written = set()
    for p in range(128):
        row, chunk = p // 8, p % 8
        first = row * 128 + ((chunk ^ (row % 8)) * 16)
        for i in range(BM // 16):
            for e in range(8):
                address = stage + first + i * 2048 + 2 * e
                check(address not in written, f"copy to {address} twice")
                written.add(address)
                smem[address] = a(row + 16 * i, kt * BK + chunk * 8 + e)
        for i in range(BK // 16):
            for box in range(BN // 64):
                for e in range(8):
                    address = stage + A_BYTES + box * B_BOX_BYTES + first + i * 2048 + 2 * e
                    check(address not in written, f"copy to {address} twice")
                    written.add(address)
                    smem[address] = b(kt * BK + row + 16 * i, col0 + 64 * box + chunk * 8 + e)
    # Every element of the stage: A's 128 x 64 and B's 64 x 256, two bytes each.
    check(len(written) == STAGE_BYTES // 2, f"the copies wrote {len(written)} elements of {STAGE_BYTES // 2}")


def ldmatrix_x4(smem, addresses, trans):
    """regs[l][q]: the two elements lane l gets in register q, from the rows lanes 8q.. name."""
    regs = [[None] * 4 for _ in range(32)]
    for l in range(32):
        g, t = l // 4, l % 4
        for q in range(4):
            if trans:
                regs[l][q] = tuple(smem[addresses[8 * q + 2 * t + d] + 2 * g] for d in (0, 1))
            else:
                regs[l][q] = tuple(smem[addresses[8 * q + g] + 2 * (2 * t + d)] for d in (0, 1))
    return regs


def mma_sync_square(smem, stage, consumer, warp):
    """One consumer warp's reads of a stage, as the loop's addresses give them: for each lane, its 128 values'
    (A element, B element) products summed over the stage's 64 k (the k-tile's share of d_), by value index."""
    values = [[0] * 128 for _ in range(32)]
    chunk_of = lambda l: ((l // 16) ^ (l % 8)) * 16
    for kk in range(BK // 16):
        fa = []
        for mi in range(4):
            addresses = []
            for l in range(32):
                a0 = stage + (consumer * 64 + l % 16) * 128 + chunk_of(l)
                at = (a0 ^ (kk * 32)) + mi * 2048
                # The XOR form is the swizzle's direct address of row r, chunk c.
                r, c = consumer * 64 + mi * 16 + l % 16, kk * 2 + l // 16
                check(at == stage + r * 128 + ((c ^ (r % 8)) * 16), "A address, lane %d kk %d mi %d" % (l, kk, mi))
                addresses.append(at)
            fa.append(ldmatrix_x4(smem, addresses, False))
        for nj in range(4):
            addresses = []
            for l in range(32):
                b0 = stage + A_BYTES + warp * B_BOX_BYTES + (l % 16) * 128 + chunk_of(l)
                at = (b0 ^ (nj * 32)) + kk * 2048
                r, c = kk * 16 + l % 16, nj * 2 + l // 16
                check(at == stage + A_BYTES + warp * B_BOX_BYTES + r * 128 + ((c ^ (r % 8)) * 16),
                      "B address, lane %d kk %d nj %d" % (l, kk, nj))
                addresses.append(at)
            fb = ldmatrix_x4(smem, addresses, True)
            for mi in range(4):
                for q, ni in ((0, 2 * nj), (1, 2 * nj + 1)):
                    # mma m16n8k16 on this lane's fragments: A (16 x 16) from the warp's fa[mi], B (16 x 8) from fb's
                    # registers 2q, 2q + 1, each lane's C values as the sums of the rebuilt tiles.
                    A = [[None] * 16 for _ in range(16)]
                    B = [[None] * 8 for _ in range(16)]
                    for l in range(32):
                        g, t = l // 4, l % 4
                        for reg, (row, col) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
                            A[row][col], A[row][col + 1] = fa[mi][l][reg]
                        for reg, k0 in ((2 * q, 2 * t), (2 * q + 1, 2 * t + 8)):
                            B[k0][g], B[k0 + 1][g] = fb[l][reg]
                    for l in range(32):
                        g, t = l // 4, l % 4
                        for e in range(4):
                            row, col = g + (8 if e >= 2 else 0), 2 * t + (e & 1)
                            values[l][4 * (mi * 8 + ni) + e] += sum(A[row][k] * B[k][col] for k in range(16))
    return values


random.seed(7)
KT = 2
A_full = [[random.randint(-3, 3) for _ in range(KT * BK)] for _ in range(BM)]
B_full = [[random.randint(-3, 3) for _ in range(BN)] for _ in range(KT * BK)]
d = {(c, w, l): [0] * 128 for c in range(2) for w in range(4) for l in range(32)}
for kt in range(KT):
    smem = {}
    mma_sync_copies(smem, 0, lambda r, k: A_full[r][k], lambda k, n: B_full[k][n], 0, kt)
    tma = {}
    load_stage(tma, 0, lambda r, k: A_full[r][k], lambda k, n: B_full[k][n], 0, 0, kt)
    check(smem == tma, "the mma.sync producer's stage differs from TMA's (k-tile %d)" % kt)
    for consumer in range(2):
        for warp in range(4):
            for l, vals in enumerate(mma_sync_square(smem, 0, consumer, warp)):
                d[(consumer, warp, l)] = [x + y for x, y in zip(d[(consumer, warp, l)], vals)]
bad = 0
for (consumer, warp, l), vals in d.items():
    row_base, col_base = consumer * 64 + l // 4, warp * 64 + (l % 4) * 2
    for i, v in enumerate(vals):
        row = row_base + (i // 4 // 8) * 16 + (8 if i % 4 >= 2 else 0)
        col = col_base + (i // 4 % 8) * 8 + (i & 1)
        want = sum(A_full[row][k] * B_full[k][col] for k in range(KT * BK))
        if v != want:
            bad += 1
check(bad == 0, "the mma.sync loop's tile differs from A x B in %d values" % bad)
# gemm_store's pairs: value 4 f (+ 1) at `at`, 4 f + 2 (+ 3) a row of 8 below, for both loops' layouts.
for fragment_cols in (8, 32):
    for f in range(32):
        for e in range(4):
            i = 4 * f + e
            at = (f // fragment_cols) * 16 * BN + (f % fragment_cols) * 8 + (8 * BN if e >= 2 else 0) + (e & 1)
            row = (i // 4 // fragment_cols) * 16 + (8 if i % 4 >= 2 else 0)
            col = (i // 4 % fragment_cols) * 8 + (i & 1)
            check(at == row * BN + col, "gemm_store's pair %d (fragments of %d columns)" % (i, fragment_cols))


def simulate_mma_sync(tiles, ktiles, seed, producers=8, full_count=None, empty_count=8, parity_xor=1,
                      release_before_read=False, stages=STAGES):
    """The mma.sync loop's pipeline: `producers` copying threads (128 in the kernel; fewer here, the same protocol),
    each waiting for a stage to be empty, issuing its copies and a cp.async.mbarrier.arrive.noinc that fires once
    they land; 8 consumer warps, each waiting for the stage to be full, reading it with ldmatrix (done when the step
    runs: the fragments are in registers) and arriving on its empty barrier. 'ok', or what went wrong."""
    rnd = random.Random(seed)
    full_count = producers if full_count is None else full_count
    full = [Barrier(full_count) for _ in range(stages)]
    empty = [Barrier(empty_count) for _ in range(stages)]
    parts = [[None] * producers for _ in range(stages)]  # per stage: the (tile, kt) each thread's copies wrote
    work = [(t, kt) for t in range(tiles) for kt in range(ktiles)]
    threads = [{"i": 0, "step": "wait"} for _ in range(producers)]
    warps = [{"i": 0, "step": "wait"} for _ in range(8)]
    landing = []  # (thread, stage, tag): copies in flight, and the arrival they trigger
    while True:
        moves = []
        for p, me in enumerate(threads):
            it = me["i"]
            if it < len(work) and (me["step"] == "issue" or empty[it % stages].done(((it // stages) & 1) ^ parity_xor)):
                moves.append(("thread", p))
        for w, me in enumerate(warps):
            it = me["i"]
            if it < len(work) and (me["step"] != "wait" or full[it % stages].done((it // stages) & 1)):
                moves.append(("warp", w))
        moves += [("land", i) for i in range(len(landing))]
        if not moves:
            break
        move = rnd.choice(moves)
        if move[0] == "thread":
            me = threads[move[1]]
            it = me["i"]
            if me["step"] == "wait":
                me["step"] = "issue"
            else:
                landing.append((move[1], it % stages, work[it]))
                me.update(i=it + 1, step="wait")
        elif move[0] == "land":
            p, st, tag = landing.pop(move[1])
            parts[st][p] = tag
            if not full[st].arrive():
                return "more arrivals on full[%d] than it counts" % st
        else:
            # Two moves after the wait: the read (ldmatrix) and the release (the empty arrival), in the kernel's
            # order, or the other way round in the mutant; copies may land in between.
            w = move[1]
            me = warps[w]
            it = me["i"]
            st = it % stages
            order = ["release", "read"] if release_before_read else ["read", "release"]
            step = order[0] if me["step"] == "wait" else me["step"]
            if step == "read":
                if any(part != work[it] for part in parts[st]):
                    return "warp %d read stage %d holding %s, wanted %s" % (w, st, parts[st], work[it])
            elif not empty[st].arrive():
                return "more arrivals on empty[%d] than it counts" % st
            if step == order[1]:
                me.update(i=it + 1, step="wait")
            else:
                me["step"] = order[1]
    unfinished = any(t["i"] < len(work) for t in threads) or landing or any(w["i"] < len(work) for w in warps)
    return "deadlock" if unfinished else "ok"


bad_runs = [(t, k, seed, stages, r) for (t, k) in SHAPES for seed in range(40) for stages in (2, 3, 4)
            for r in [simulate_mma_sync(t, k, seed, stages=stages)] if r != "ok"]
check(not bad_runs, "the mma.sync pipeline fails: %s" % bad_runs[:3])
MMA_SYNC_MUTANTS = {"full counts one thread fewer": dict(full_count=7), "empty counts one warp fewer": dict(empty_count=7),
                    "producer waits parity 0 first": dict(parity_xor=0),
                    "warps release before reading": dict(release_before_read=True)}
caught = {name: sum(simulate_mma_sync(t, k, seed, **kw) != "ok" for (t, k) in SHAPES for seed in range(40))
          for name, kw in MMA_SYNC_MUTANTS.items()}
check(all(caught.values()), "the mma.sync pipeline model misses wrong protocols: %s"
      % [name for name, n in caught.items() if n == 0])
print("mma.sync pipeline on 2, 3 and 4 stages: %d random schedules, no stale read, no overwrite, no deadlock; wrong protocols caught: %s"
      % (3 * len(SHAPES) * 40, ", ".join("%s (%d runs)" % (name, n) for name, n in caught.items())))
print("mma.sync loop: its copies write TMA's stage layout, its ldmatrix addresses are the swizzle's, and a 128 x 256 "
      "tile over %d k-tiles equals A x B; gemm_store's pairs follow both layouts" % KT)

if failures:
    print("FAILED: %d mismatches" % len(failures))
    sys.exit(1)
print("OK: the TMA wgmma experiment's boxes, descriptors, epilogue and pipeline agree with the PTX/CuTe model")
