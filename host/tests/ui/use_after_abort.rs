// abort consumes the communicator: nothing can use it afterwards.
use weft_host::Communicator;

fn demo(comm: Communicator) {
    comm.abort().unwrap();
    let _ = comm.split(Some(0), 0, None);
}

fn main() {}
