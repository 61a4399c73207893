#!/usr/bin/env python3
"""A CPU model of the tensor-parallel GEMM kernels' distribution logic (kit/src/kernels/gemm_tp.rs), to check their
indexing without GPUs: which tiles each block of each rank computes, whose window each tile's rows come from or go
to, the reduce-scatter slots, and the decoupled all-gather's chunks and flags. Each kernel's loops are transcribed
(grid-stride over blocks, the walk order, owners and offsets); a tile's product is `a_rows @ b_cols` (the mainloop
itself is scripts/gemm_layout_model.py's). Every rank's result is compared with the reference, for 1, 2, 4 and 8
ranks and grids smaller and larger than the tile count. Needs numpy (see gemm_layout_model.py). It exits non-zero
on a mismatch, and when a line of gemm_tp.rs that it transcribes changes (keep the two in step)."""
import os

import numpy as np
from model_guard import read_transcribed

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kit", "src", "kernels", "gemm_tp.rs")
TRANSCRIBED = [
    "let first = (dev.lsa_rank() as usize) * (shard / 128) * tiles_n;",
    "let tile_index = (t + first) % tiles;",
    "let owner = band % ranks;",
    "let local_row0 = (band / ranks) * 128;",
    "let base = slot + local_row0 * n + col0;",
    "let first = (band / ranks) * 128 * n + (t % tiles_n) * 128;",
    "let c = (i + first) % chunks;",
]
read_transcribed(KERNELS, TRANSCRIBED, "gemm_tp.rs")

rng = np.random.default_rng(1)


def allgather_gemm(ranks, m, n, k, grid):
    shard = m // ranks
    xs = [rng.standard_normal((shard, k)) for _ in range(ranks)]  # each rank's window
    ws = [rng.standard_normal((k, n)) for _ in range(ranks)]
    tiles_n, tiles = n // 128, (m // 128) * (n // 128)
    for me in range(ranks):
        out = np.full((m, n), np.nan)
        first = me * (shard // 128) * tiles_n
        for block in range(grid):
            t = block
            while t < tiles:
                tile_index = (t + first) % tiles
                row0, col0 = (tile_index // tiles_n) * 128, (tile_index % tiles_n) * 128
                owner = row0 // shard
                local = row0 - owner * shard
                a = xs[owner][local:local + 128, :]
                out[row0:row0 + 128, col0:col0 + 128] = a @ ws[me][:, col0:col0 + 128]
                t += grid
        want = np.vstack(xs) @ ws[me]
        assert np.allclose(out, want), ("allgather_gemm", ranks, m, n, k, grid, me)


def gemm_reduce_scatter(ranks, m, n, k, grid):
    shard = m // ranks
    xs = [rng.standard_normal((m, k)) for _ in range(ranks)]
    ws = [rng.standard_normal((k, n)) for _ in range(ranks)]
    scratch = [np.full(m * n, np.nan) for _ in range(ranks)]  # each rank's f32 window, R slots of shard x n
    writer = [np.full(m * n, -1) for _ in range(ranks)]  # which block index stored each element
    tiles_n, tiles = n // 128, (m // 128) * (n // 128)
    for me in range(ranks):
        slot = me * shard * n
        for block in range(grid):
            t = block
            while t < tiles:
                band = t // tiles_n
                owner, local_row0, col0 = band % ranks, (band // ranks) * 128, (t % tiles_n) * 128
                row0 = owner * shard + local_row0
                tile = xs[me][row0:row0 + 128, :] @ ws[me][:, col0:col0 + 128]
                base = slot + local_row0 * n + col0
                for r in range(128):
                    scratch[owner][base + r * n: base + r * n + 128] = tile[r]
                    writer[owner][base + r * n: base + r * n + 128] = block
                t += grid
    total = sum(x @ w for x, w in zip(xs, ws))
    count = shard * n
    for me in range(ranks):
        out = np.full(count, np.nan)
        for block in range(grid):
            t = block
            while t < tiles:
                band = t // tiles_n
                if band % ranks == me:
                    first = (band // ranks) * 128 * n + (t % tiles_n) * 128
                    for i in range(128):
                        e = np.arange(first + i * n, first + i * n + 128)
                        # The per-block barrier orders only block `block` of every rank before this read.
                        for s in range(ranks):
                            assert (writer[me][s * count + e] == block).all(), ("read of another block's store", me)
                        out[e] = sum(scratch[me][s * count + e] for s in range(ranks))
                t += grid
        want = total[me * shard:(me + 1) * shard].reshape(-1)
        assert np.allclose(out, want), ("gemm_reduce_scatter", ranks, m, n, k, grid, me)


def allgather_signal(ranks, m, k, grid, chunk_rows=128, lanes=8):
    shard = (m // ranks) * k
    chunk = chunk_rows * k
    xs = [rng.standard_normal(shard) for _ in range(ranks)]
    for me in range(ranks):
        gathered = np.full(shard * ranks, np.nan)
        ready = [0] * (m // chunk_rows)
        per_shard = shard // chunk
        chunks = per_shard * ranks
        packs = chunk // lanes
        first = me * per_shard
        order = []
        for block in range(grid):
            i = block
            while i < chunks:
                c = (i + first) % chunks
                owner = c // per_shard
                frm, to = (c % per_shard) * packs, c * packs
                gathered[to * lanes:(to + packs) * lanes] = xs[owner][frm * lanes:(frm + packs) * lanes]
                ready[c] = 1
                order.append(c)
                i += grid
        assert np.array_equal(gathered, np.concatenate(xs)), ("allgather_signal", ranks, m, k, grid, me)
        assert all(ready) and len(order) == chunks == len(ready), ("flags", ranks, m, k, grid, me)
        # The host waits on flags owner*chunks_per_shard.. for each owner's GEMM: the chunks of owner's rows.
        for owner in range(ranks):
            rows = range(owner * (m // ranks), (owner + 1) * (m // ranks))
            flagged = [c for c in range(chunks) if c // per_shard == owner]
            assert [r // chunk_rows for r in rows][::chunk_rows] == flagged, ("owner chunks", owner)


for ranks in (1, 2, 4, 8):
    for (m, n, k) in ((1024, 256, 64), (2048, 384, 32)):
        for grid in (1, 3, 64):
            allgather_gemm(ranks, m, n, k, grid)
            gemm_reduce_scatter(ranks, m, n, k, grid)
            allgather_signal(ranks, m, k, grid)
print("OK: allgather_gemm, gemm_reduce_scatter and allgather_signal: every rank's result matches at 1, 2, 4, 8 ranks")
