//! The element counts NCCL is handed, from the lengths of the buffers it reads and writes.
//!
//! NCCL takes one `count` per call and trusts that every buffer holds what the operation reads or writes with it:
//! all-gather writes `nranks × count` elements, reduce-scatter reads as many, the root of a gather writes (and the
//! root of a scatter reads) `nranks × count`. Each function here derives the count from the buffers and refuses
//! lengths that would let NCCL run past one ([`Error::InvalidArgument`], naming the buffer and the rule). Pure
//! arithmetic, so the rules are tested without a GPU.

use crate::error::Error;

fn expect_len(argument: &'static str, got: usize, want: usize, rule: &str) -> Result<(), Error> {
    if got == want {
        Ok(())
    } else {
        Err(Error::invalid(argument, format!("holds {got} elements but must hold {want} ({rule})")))
    }
}

/// `count × nranks`, refusing an overflow (a length no buffer has, never a wrapped one).
fn times_ranks(argument: &'static str, count: usize, nranks: usize) -> Result<usize, Error> {
    count.checked_mul(nranks).ok_or_else(|| {
        Error::invalid(argument, format!("{count} elements × {nranks} ranks overflows the address space"))
    })
}

/// The count of an operation that reads and writes the same number of elements (all-reduce, broadcast, reduce).
pub(crate) fn same(read: usize, written: usize, rule: &str) -> Result<usize, Error> {
    expect_len("recv", written, read, rule)?;
    Ok(read)
}

/// All-gather: `recv` holds `send.len() × nranks`.
pub(crate) fn all_gather(send: usize, recv: usize, nranks: usize) -> Result<usize, Error> {
    expect_len("recv", recv, times_ranks("send", send, nranks)?, "send.len() * nranks")?;
    Ok(send)
}

/// Reduce-scatter: `send` holds `recv.len() × nranks`.
pub(crate) fn reduce_scatter(send: usize, recv: usize, nranks: usize) -> Result<usize, Error> {
    expect_len("send", send, times_ranks("recv", recv, nranks)?, "recv.len() * nranks")?;
    Ok(recv)
}

/// The block of an in-place all-gather or reduce-scatter over one buffer of `total` elements, or of an
/// all-to-all: `total` splits into `nranks` equal blocks.
pub(crate) fn blocks(argument: &'static str, total: usize, nranks: usize) -> Result<usize, Error> {
    if nranks == 0 || total % nranks != 0 {
        return Err(Error::invalid(argument, format!("{total} elements do not split into {nranks} equal blocks")));
    }
    Ok(total / nranks)
}

/// All-to-all: equal lengths that split into `nranks` blocks; the count is one block.
pub(crate) fn all_to_all(send: usize, recv: usize, nranks: usize) -> Result<usize, Error> {
    expect_len("recv", recv, send, "all_to_all receives as many elements as it sends")?;
    blocks("send", send, nranks)
}

/// Gather: every rank sends `send` elements; the root alone passes `recv`, of `send × nranks`.
pub(crate) fn gather(send: usize, recv: Option<usize>, nranks: usize, is_root: bool) -> Result<usize, Error> {
    match (recv, is_root) {
        (Some(recv), true) => expect_len("recv", recv, times_ranks("send", send, nranks)?, "send.len() * nranks")?,
        (None, true) => return Err(Error::invalid("recv", "the root must pass a receive buffer")),
        (Some(_), false) => return Err(Error::invalid("recv", "only the root receives: pass None on other ranks")),
        (None, false) => {}
    }
    Ok(send)
}

/// Scatter: every rank receives `recv` elements; the root alone passes `send`, of `recv × nranks`.
pub(crate) fn scatter(send: Option<usize>, recv: usize, nranks: usize, is_root: bool) -> Result<usize, Error> {
    match (send, is_root) {
        (Some(send), true) => expect_len("send", send, times_ranks("recv", recv, nranks)?, "recv.len() * nranks")?,
        (None, true) => return Err(Error::invalid("send", "the root must pass a send buffer")),
        (Some(_), false) => return Err(Error::invalid("send", "only the root sends: pass None on other ranks")),
        (None, false) => {}
    }
    Ok(recv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<usize, Error>, argument: &str, needle: &str) {
        match result {
            Err(Error::InvalidArgument { argument: got, problem }) => {
                assert_eq!(got, argument, "{problem}");
                assert!(problem.contains(needle), "{problem}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn equal_length_operations_take_the_common_length() {
        assert_eq!(same(8, 8, "r").unwrap(), 8);
        // A receive buffer shorter than the input would be written past its end by all_reduce / reduce / broadcast.
        refused(same(8, 7, "rule"), "recv", "holds 7 elements but must hold 8 (rule)");
        refused(same(8, 9, "rule"), "recv", "must hold 8");
    }

    #[test]
    fn all_gather_needs_nranks_blocks_to_receive() {
        assert_eq!(all_gather(4, 16, 4).unwrap(), 4);
        refused(all_gather(4, 15, 4), "recv", "must hold 16");
        // The attack: a receive buffer of one block on 4 ranks, which NCCL would write 4 blocks into.
        refused(all_gather(4, 4, 4), "recv", "send.len() * nranks");
        refused(all_gather(usize::MAX / 2 + 1, 0, 2), "send", "overflows");
    }

    #[test]
    fn reduce_scatter_needs_nranks_blocks_to_send() {
        assert_eq!(reduce_scatter(16, 4, 4).unwrap(), 4);
        refused(reduce_scatter(4, 4, 4), "send", "recv.len() * nranks");
        refused(reduce_scatter(0, usize::MAX, 3), "recv", "overflows");
    }

    #[test]
    fn in_place_and_all_to_all_buffers_split_evenly() {
        assert_eq!(blocks("buffer", 12, 4).unwrap(), 3);
        refused(blocks("buffer", 10, 4), "buffer", "do not split into 4 equal blocks");
        refused(blocks("buffer", 10, 0), "buffer", "0 equal blocks");
        assert_eq!(all_to_all(12, 12, 3).unwrap(), 4);
        refused(all_to_all(12, 8, 3), "recv", "receives as many elements as it sends");
        refused(all_to_all(10, 10, 3), "send", "equal blocks");
    }

    #[test]
    fn root_only_buffers_are_the_roots_and_sized_for_every_rank() {
        assert_eq!(gather(4, Some(12), 3, true).unwrap(), 4);
        assert_eq!(gather(4, None, 3, false).unwrap(), 4);
        refused(gather(4, Some(4), 3, true), "recv", "send.len() * nranks");
        refused(gather(4, None, 3, true), "recv", "the root must pass");
        refused(gather(4, Some(12), 3, false), "recv", "only the root receives");
        assert_eq!(scatter(Some(12), 4, 3, true).unwrap(), 4);
        assert_eq!(scatter(None, 4, 3, false).unwrap(), 4);
        refused(scatter(Some(11), 4, 3, true), "send", "recv.len() * nranks");
        refused(scatter(None, 4, 3, true), "send", "the root must pass");
        refused(scatter(Some(12), 4, 3, false), "send", "only the root sends");
    }
}
