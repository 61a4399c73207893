"""The drift guard the CPU models share (scripts/*_model.py): each transcribes lines of the code it models, and
stops with exit status 1 when one of them is no longer there, naming them, so that model and code change together."""
import sys


def read_transcribed(path, lines, what):
    """The text of `path`, after checking it still contains every one of `lines` (exit 1 listing those it lost)."""
    with open(path) as f:
        source = f.read()
    drifted = [line for line in lines if line not in source]
    if drifted:
        print(what + " no longer has these lines the model transcribes (update the model):", *drifted, sep="\n  ")
        sys.exit(1)
    return source


# The lines of weft.cuh's GemmCopies (gemm_block's copies into a stage) that both gemm_layout_model.py (the mma.sync
# stage layout) and wgmma_layout_model.py (the wgmma one) transcribe; the two layouts differ only in `b_to` and
# `B_SECOND`, which each model lists itself.
GEMM_COPIES_LINES = [
    "const uint32_t tid = threadIdx.x, ar = tid / 4, ac = tid % 4, br = tid / 16, bc = tid % 16;",
    "a_to = ar * 32 + ((ac ^ ((ar >> 1) & 3)) * 8);",
    "a_from = a + ar * lda + ac * 8;",
    "b_from = b + br * ldb + bc * 8;",
    "a_second = 64 * lda;",
    "b_second = 16 * ldb;",
    "b_ktile = GEMM_BK * ldb;",
    "cp_async_16(sa + a_to, a_from);",
    "cp_async_16(sa + a_to + 64 * 32, a_from + a_second);",
    "cp_async_16(sb + b_to, b_from);",
    "cp_async_16(sb + b_to + B_SECOND, b_from + b_second);",
    "a_from += GEMM_BK;",
    "b_from += b_ktile;",
]
