//! All-reduce + bias + residual in one shot and without a barrier: the data carries its own "written" flag
//! (Lamport; the vocabulary's [`Lamport`] packs), for small messages where the two LSA barriers of
//! [`allreduce_bias_residual_one_shot`](super::allreduce_epilogue::allreduce_bias_residual_one_shot()) cost as much as
//! the data (bench/RESULTS.md: below 64 KB weft's one-shot only ties `ncclAllReduce`).
//!
//! ```text
//! out[r][c] = sum over ranks of x_rank[r][c]  +  bias[c]  +  residual[r][c]        (x, out: rows x hidden)
//! ```
//!
//! Every rank owns a symmetric window `lamport` of three buffers, each with one slot of `n` elements per rank
//! (`3 × lsa_size × n` elements), that starts with every element at the sentinel (negative zero). In round `i`
//! (buffer `k = i mod 3`) each block:
//!
//! 1. pushes its packs of `x` into slot `me` of buffer `k` of every peer (itself included), negative zeros made
//!    positive so that nothing written looks unwritten;
//! 2. for each of its packs, polls slot `q` of its own buffer `k` for every rank `q` until no lane is the sentinel
//!    (or the deadline passes: then `status[0] = 1` and the result is wrong, never a hang), and writes
//!    `sum + bias + residual`, adding the ranks in the same order everywhere (bitwise the same result on every
//!    rank);
//! 3. clears its packs of every slot of buffer `i − 1 mod 3` of its own window, which every peer finished writing
//!    (round `i − 1`) and this block finished reading (its round `i − 1`). A peer writes that buffer again in round
//!    `i + 2`, which it can reach only after reading this rank's round `i + 1` pushes, which come after this
//!    kernel: three buffers are what makes the scheme need no barrier at all.
//!
//! The round is counted per block on the device (`rounds[block]`), so consecutive launches, and replays of a CUDA
//! graph, need no argument from the host. Every rank must launch it with the same grid (block `b` of every rank
//! handles the same packs), and a failed round (a peer that never came, or a timeout) leaves the buffers in an
//! unknown state: refill them with the sentinel and zero the rounds on every rank before the next use (the host
//! helper `LamportAllReduce` in the examples does).
//!
//! Rows must be a whole number of 16-byte packs (`hidden % pack_lanes::<T>() == 0`, every transformer width); the
//! host helper refuses other shapes.

use weft::prelude::*;

use super::allreduce_epilogue::epilogue_next_column;

/// The Lamport one-shot all-reduce + bias + residual (module docs). `lamport`: `3 × lsa_size × n` elements, all the
/// sentinel before the first round; `rounds`: one counter per block (zero before the first round); `status[0]` is
/// set to 1 if a wait timed out; `x`: this rank's `n` partial activations; `timeout_ns`: how long a block waits for
/// a peer's pack.
#[weft::kernel(types(f32, bf16), len(residual >= n, out >= n, bias >= hidden, x >= n, status >= 1))]
#[allow(clippy::too_many_arguments)]
pub fn allreduce_bias_residual_lamport<T: Float>(
    dev: &DevComm<Lsa>,
    lamport: &Window<T>,
    rounds: &mut [u32],
    status: &mut [u32],
    x: &[T],
    bias: &[T],
    residual: &[T],
    out: &mut [T],
    n: usize,
    hidden: usize,
    timeout_ns: u64,
) {
    // Launched programmatically (PDL), the kernel may start before the previous one on the stream ends: wait for it
    // (it may write `x` or `residual`, or be the previous round) before reading anything (a no-op otherwise). The
    // deadline starts after it.
    pdl_wait();
    let deadline = global_timer_ns() + timeout_ns;
    let peers = dev.lsa_size() as usize;
    let me = dev.lsa_rank() as usize;
    let block = block_idx_x() as usize;
    let round = rounds[block] as usize;
    let current = round % 3;
    let previous = (round + 2) % 3;
    let lanes = pack_lanes::<T>();
    let packs = n / lanes;
    let row_packs = hidden / lanes;
    let stride = grid_size_1d();

    // 1. Push: this rank's packs into slot `me` of buffer `current` of every peer.
    for p in grid_stride(packs) {
        let v = x.load_pack(p);
        for peer in 0..peers {
            lamport.lsa(peer as u32).lamport_store_pack((current * peers + me) * packs + p, v);
        }
    }

    // 2. Pull every rank's pack, add the epilogue; 3. clear the previous round's buffer.
    let mut local = lamport.local();
    let mut timed_out = false;
    let step = stride % row_packs;
    let mut p = index_1d();
    let mut c = p % row_packs;
    while p < packs {
        let mut acc = residual.load_pack(p).widen() + bias.load_pack(c).widen();
        for peer in 0..peers {
            let v = local.lamport_wait_pack((current * peers + peer) * packs + p, deadline);
            if !v.lamport_ready() {
                timed_out = true;
            }
            acc += v.widen();
        }
        out.store_pack(p, acc.narrow());
        for peer in 0..peers {
            local.lamport_clear_pack((previous * peers + peer) * packs + p);
        }
        p += stride;
        c = epilogue_next_column(c, step, row_packs);
    }
    // A programmatic dependent may start launching (its `pdl_wait()` still waits for this kernel to end).
    pdl_launch_dependents();
    if timed_out {
        status[0] = 1;
    }
    // The clears reach every peer's view of this memory before this rank's next pushes can (next launch).
    threadfence_system();
    sync_threads();
    if thread_idx_x() == 0 {
        rounds[block] = ((round + 1) % 3) as u32;
    }
}
