// An uninitialised communicator has no rank: reading one must not compile.
use weft_host::Communicator;

fn main() {
    let comm = Communicator::uninit(0).unwrap();
    let _ = comm.rank();
}
