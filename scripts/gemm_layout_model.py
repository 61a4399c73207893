#!/usr/bin/env python3
"""A CPU model of the block GEMM mainloop's data movement (weft.cuh, `detail::gemm_block_at`), to check its index
math without a GPU: the cp.async stage fill with its XOR swizzle, the ldmatrix.x4 / x4.trans addresses, the
mma.sync m16n8k16 register layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16") and the epilogue's
`GemmTile::row/col` mapping. It rebuilds each fragment from the lanes' registers, multiplies, scatters the result
through the epilogue mapping and compares with A @ B. It does not model timing, bank conflicts or the pipeline's
waits (the code comments argue those). Needs numpy: tests/models.rs runs it with the venv `cargo xtask` provisions
(`target/weft-toolchain/venv/bin/python scripts/gemm_layout_model.py`); it exits non-zero on a mismatch, and when a
line of weft.cuh that it transcribes changes (keep the two in step)."""
import os
import sys

import numpy as np
from model_guard import GEMM_COPIES_LINES, read_transcribed
rng=np.random.default_rng(0)

# The lines of weft.cuh this model transcribes: if one changes, update the model with it.
CUH = os.environ.get("WEFT_CUH", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device", "cuda", "weft.cuh"))
TRANSCRIBED = [
    "constexpr int GEMM_STAGES = 3;",
    "constexpr int GEMM_BK = 32;",
    *GEMM_COPIES_LINES,
    "b_to = br * 128 + ((bc ^ (br & 7)) * 8);",
    "constexpr uint32_t B_SECOND = 16 * 128;",
    "uint32_t wm = (warp / 4) * 64, wn = (warp % 4) * 32;",
    "uint32_t r = wm + mi * 16 + lane % 16, c = kk * 2 + lane / 16;",
    "ldmatrix_x4<false>(ta + r * 32 + ((c ^ ((r >> 1) & 3)) * 8), fa[mi].r[0], fa[mi].r[1], fa[mi].r[2],",
    "uint32_t r = kk * 16 + lane % 16, c = wn / 8 + nj * 2 + lane / 16;",
    "ldmatrix_x4<true>(tb + r * 128 + ((c ^ (r & 7)) * 8), fb[2 * nj].r[0], fb[2 * nj].r[1], fb[2 * nj + 1].r[0],",
    "return (warp / 4) * 64 + (f / 4) * 16 + in_fragment;",
    "return (warp % 4) * 32 + (f % 4) * 8 + in_fragment;",
]
read_transcribed(CUH, TRANSCRIBED, "weft.cuh")
failures = []
BK=32; STAGES=3
def simulate(M,N,K,lda,ldb,row0,col0):
    A=rng.standard_normal((M*lda,)).astype(np.float64)
    B=rng.standard_normal((K*ldb,)).astype(np.float64)
    # tile
    a=A[row0*lda:]; b=B[col0:]
    acc=np.zeros((8,32,4,4,4))  # warp, lane, mi, ni, e
    ktiles=K//BK
    sa=np.zeros((STAGES,128*32)); sb=np.zeros((STAGES,32*128))
    def load(stage,kt):
        # GemmCopies: each thread's offsets a_to, b_to and the second chunks 64 rows (A) and 16 k-rows (B) on, its
        # sources advanced kt k-tiles; every element of the stage written exactly once.
        written_a=np.zeros(128*32,dtype=int); written_b=np.zeros(32*128,dtype=int)
        for tid in range(256):
            ar,ac,br,bc=tid//4,tid%4,tid//16,tid%16
            a_to=ar*32+((ac^((ar>>1)&3))*8); b_to=br*128+((bc^(br&7))*8)
            a_from=ar*lda+ac*8+kt*BK; b_from=br*ldb+bc*8+kt*BK*ldb
            for dst,src in ((a_to,a_from),(a_to+64*32,a_from+64*lda)):
                sa[stage,dst:dst+8]=a[src:src+8]; written_a[dst:dst+8]+=1
            for dst,src in ((b_to,b_from),(b_to+16*128,b_from+16*ldb)):
                sb[stage,dst:dst+8]=b[src:src+8]; written_b[dst:dst+8]+=1
        if not ((written_a==1).all() and (written_b==1).all()):
            failures.append(f"k-tile {kt}: the copies do not fill each stage element exactly once")
    def ldmatrix(smem, addrs, trans):
        # addrs: 32 element offsets (row starts of 8 elements); returns regs[lane][4][2]
        out=np.zeros((32,4,2))
        for mat in range(4):
            rows=[smem[addrs[mat*8+r]:addrs[mat*8+r]+8] for r in range(8)]
            m=np.array(rows)  # 8x8
            for t in range(32):
                if not trans:
                    out[t,mat]=m[t//4, (t%4)*2:(t%4)*2+2]
                else:
                    out[t,mat]=[m[(t%4)*2, t//4], m[(t%4)*2+1, t//4]]
        return out
    for kt in range(ktiles):
        s=kt%STAGES
        load(s,kt)  # pipeline order doesn't change the math
        for warp in range(8):
            wm=(warp//4)*64; wn=(warp%4)*32
            for kk in range(BK//16):
                fa=[]
                for mi in range(4):
                    addrs=[]
                    for lane in range(32):
                        r=wm+mi*16+lane%16; c=kk*2+lane//16
                        addrs.append(r*32+((c^((r>>1)&3))*8))
                    fa.append(ldmatrix(sa[s],addrs,False))
                fb=[None]*4
                for nj in range(2):
                    addrs=[]
                    for lane in range(32):
                        r=kk*16+lane%16; c=wn//8+nj*2+lane//16
                        addrs.append(r*128+((c^(r&7))*8))
                    regs=ldmatrix(sb[s],addrs,True)
                    fb[2*nj]=regs[:,0:2]; fb[2*nj+1]=regs[:,2:4]
                # mma per fragment: reconstruct A (16x16), B (16x8) from lanes then multiply
                for mi in range(4):
                    Af=np.zeros((16,16))
                    for lane in range(32):
                        g,t=lane//4,lane%4
                        r=fa[mi][lane]
                        Af[g,2*t:2*t+2]=r[0]; Af[g+8,2*t:2*t+2]=r[1]; Af[g,2*t+8:2*t+10]=r[2]; Af[g+8,2*t+8:2*t+10]=r[3]
                    for ni in range(4):
                        Bf=np.zeros((16,8))
                        for lane in range(32):
                            g,t=lane//4,lane%4
                            r=fb[ni][lane]
                            Bf[2*t:2*t+2,g]=r[0]; Bf[2*t+8:2*t+10,g]=r[1]
                        C=Af@Bf
                        for lane in range(32):
                            g,t=lane//4,lane%4
                            acc[warp,lane,mi,ni]+=[C[g,2*t],C[g,2*t+1],C[g+8,2*t],C[g+8,2*t+1]]
    # epilogue mapping
    out=np.full((128,128),np.nan)
    for warp in range(8):
        for lane in range(32):
            for i in range(64):
                f,e=i//4,i%4
                row=(warp//4)*64+(f//4)*16+lane//4+(8 if e>=2 else 0)
                col=(warp%4)*32+(f%4)*8+(lane%4)*2+(e&1)
                out[row,col]=acc[warp,lane,f//4,f%4,e]
    Am=np.array([[a[r*lda+p] for p in range(K)] for r in range(128)])
    Bm=np.array([[b[p*ldb+c] for c in range(128)] for p in range(K)])
    want=Am@Bm
    err=np.nanmax(np.abs(out-want)); nans=int(np.isnan(out).sum())
    print(M,N,K,lda,ldb,row0,col0,"max err",err,"nans",nans)
    if nans or not err < 1e-9:
        failures.append((M,N,K,lda,ldb,row0,col0,err,nans))
simulate(128,128,32,32,128,0,0)
simulate(256,256,64,72,264,128,8)
if failures:
    print("MISMATCH:", failures)
    sys.exit(1)
print("OK: the mma.sync mainloop's stages, ldmatrix addresses, fragments and epilogue mapping give A @ B")
