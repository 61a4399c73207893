//! The README's program, exactly as it appears there (tests/readme.rs keeps the two equal): the kernel, then its host
//! code. `cargo run --release --example readme` on a machine with a GPU; `WEFT_RANKS=4` for four ranks.

#[weft::kernel]
fn allreduce<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Relaxed); // every peer's x is ready
    for p in grid_stride(n / pack_lanes::<T>()) {
        // 16 bytes per load and store
        let mut acc = WidePack::<T>::splat(0.0); // the pack's lanes in f32
        for peer in 0..dev.lsa_size() {
            acc += x.lsa(peer).load_pack(p).widen(); // a load straight from the peer's GPU memory
        }
        out.store_pack(p, acc.narrow());
    }
    bar.sync(Cta, Order::Release); // no peer still reads our x
}

use weft::prelude::*;

fn main() -> Result<(), weft::host::Error> {
    let placement = weft::host::Placement::from_env()?; // one rank per GPU, or WEFT_RANKS=n
    let n = 1 << 20;
    let sums = spmd(placement.devices(), &Config::new(), |comm| {
        let stream = comm.context().new_stream()?;
        let cfg = allreduce::one_wave::<f32>(comm, &stream, 512)?; // this rank's share of its GPU
        let dev = comm.dev_comm::<Lsa>(&allreduce::requirements(&cfg))?; // one LSA barrier per block
        let mut x = comm.alloc_window::<f32>(&stream, n, WindowFlags::COLL_SYMMETRIC)?;
        x.buffer_mut().copy_from_host(&vec![comm.rank() as f32 + 1.0; n])?;
        let mut out = stream.alloc_zeros::<f32>(n)?;
        allreduce::launch(&stream, cfg, &dev, &x, &mut out, n)?;
        Ok(comm.download(&stream, &out)?[0])
    })?;
    let nranks = sums.len() as f32;
    println!("{} rank(s), each summed {sums:?}; expected {}", sums.len(), nranks * (nranks + 1.0) / 2.0);
    Ok(())
}
