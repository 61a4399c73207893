// destroy consumes the communicator: nothing can use it afterwards.
use weft_host::Communicator;

fn demo(comm: Communicator) {
    let finalized = comm.finalize().unwrap();
    finalized.destroy().unwrap();
    let _ = finalized.nranks();
}

fn main() {}
