//! Ranks finding each other: listen handles, the group of a connection, and symmetric registrations.
//!
//! NCCL exchanges each rank's listen handle and hands every rank all of them in `connect`. A handle here names the
//! process and a nonce unique in it; rank 0's nonce names the group, which the ranks join in a process-wide table.
//! Memory registration (`regMrSym`) is collective: every rank of a connection registers its part of each region in
//! the same order, so the n-th registration of every rank is the same region, and once all ranks have made it each
//! knows every rank's base address and length. A put then resolves "offset o of region R on rank r" to an address
//! with no lookup, after checking that the bytes lie inside rank r's part.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::ffi;

/// The first bytes of every handle this backend writes ("weftgin1").
const MAGIC: u64 = u64::from_le_bytes(*b"weftgin1");

/// How long a rank waits for its peers at a collective step (a connection, a registration) before it gives up with
/// an error instead of holding its thread for good.
pub(crate) const PEER_DEADLINE: Duration = Duration::from_secs(60);

/// The bytes of a handle; NCCL exchanges `NCCL_NET_HANDLE_MAXSIZE`.
pub(crate) const HANDLE_BYTES: usize = 20;
const _: () = assert!(HANDLE_BYTES <= ffi::HANDLE_MAXSIZE);

/// What a listen handle carries: the process, and a nonce unique in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handle {
    pub(crate) process: u32,
    pub(crate) nonce: u64,
}

impl Handle {
    /// A new handle of this process.
    pub(crate) fn new() -> Handle {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Handle { process: std::process::id(), nonce: NEXT.fetch_add(1, Ordering::Relaxed) }
    }

    /// The handle's bytes, as NCCL exchanges them (at most `NCCL_NET_HANDLE_MAXSIZE`).
    pub(crate) fn to_bytes(self) -> [u8; HANDLE_BYTES] {
        let mut bytes = [0u8; HANDLE_BYTES];
        bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.process.to_le_bytes());
        bytes[12..20].copy_from_slice(&self.nonce.to_le_bytes());
        bytes
    }

    /// Reads rank `rank`'s handle; `None` if another backend wrote it.
    pub(crate) fn from_bytes(bytes: &[u8; HANDLE_BYTES]) -> Option<Handle> {
        let word = |range: std::ops::Range<usize>| bytes[range].iter().rev().fold(0u64, |v, b| v << 8 | u64::from(*b));
        (word(0..8) == MAGIC).then(|| Handle { process: word(8..12) as u32, nonce: word(12..20) })
    }
}

/// One rank's part of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) base: u64,
    pub(crate) len: usize,
    /// `NCCL_PTR_HOST` or `NCCL_PTR_CUDA`.
    pub(crate) kind: c_int,
}

/// A region every rank of a group registered: each rank's part, by rank.
#[derive(Debug)]
pub(crate) struct Region {
    pub(crate) parts: Arc<[Part]>,
    /// The rank that registered this handle.
    pub(crate) rank: usize,
}

impl Region {
    /// The address of `bytes` bytes at `offset` in rank `rank`'s part, checked to lie inside it.
    pub(crate) fn address(&self, rank: usize, offset: u64, bytes: usize) -> Result<u64> {
        let part = self.parts.get(rank).ok_or_else(|| {
            Error::argument(format!("rank {rank} is not a rank of this connection ({} ranks)", self.parts.len()))
        })?;
        let end = offset.checked_add(bytes as u64);
        match end {
            Some(end) if end <= part.len as u64 => Ok(part.base + offset),
            _ => Err(Error::argument(format!(
                "{bytes} bytes at offset {offset} of rank {rank}'s registration of {} bytes would run past its end \
                 (refused: nothing was copied)",
                part.len
            ))),
        }
    }

    /// This rank's own part.
    pub(crate) fn own(&self) -> Part {
        self.parts[self.rank]
    }
}

/// One registration being made by the ranks of a group.
struct Rendezvous {
    parts: Vec<Option<Part>>,
    arrived: usize,
    left: usize,
    table: Option<Arc<[Part]>>,
}

/// The ranks of one connection (`connect`), and the registrations they make together.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) nranks: usize,
    registrations: Mutex<HashMap<u64, Rendezvous>>,
    arrivals: Condvar,
}

impl std::fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendezvous").field("arrived", &self.arrived).field("left", &self.left).finish()
    }
}

impl Group {
    /// Makes registration `sequence` of `rank`, waits until every rank has made it (at most `deadline`), and
    /// returns every rank's part.
    pub(crate) fn register(&self, sequence: u64, rank: usize, part: Part, deadline: Duration) -> Result<Arc<[Part]>> {
        let nranks = self.nranks;
        let mut table = self.registrations.lock().unwrap_or_else(|e| e.into_inner());
        let entry = table.entry(sequence).or_insert_with(|| Rendezvous {
            parts: vec![None; nranks],
            arrived: 0,
            left: 0,
            table: None,
        });
        if entry.parts[rank].replace(part).is_some() {
            return Err(Error::usage(format!("rank {rank} made registration {sequence} twice")));
        }
        entry.arrived += 1;
        if entry.arrived == nranks {
            entry.table = Some(entry.parts.iter().map(|p| p.expect("every rank arrived")).collect());
            self.arrivals.notify_all();
        }
        let until = Instant::now() + deadline;
        loop {
            let entry = table.get_mut(&sequence).expect("a rendezvous stays until every rank left it");
            if let Some(parts) = entry.table.clone() {
                entry.left += 1;
                if entry.left == nranks {
                    table.remove(&sequence);
                }
                return Ok(parts);
            }
            let now = Instant::now();
            if now >= until {
                let missing: Vec<usize> = (0..nranks).filter(|r| entry.parts[*r].is_none()).collect();
                // Take this rank's part back, so that a late peer does not complete a registration nobody holds.
                entry.parts[rank] = None;
                entry.arrived -= 1;
                return Err(Error::system(format!(
                    "rank {rank}: ranks {missing:?} did not register memory (registration {sequence}) within {} s; \
                     registration is collective: every rank of the communicator must make it",
                    deadline.as_secs()
                )));
            }
            table = self.arrivals.wait_timeout(table, until - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// A group being joined: created by its first rank, removed from the table when its last rank joined.
struct Joining {
    group: Arc<Group>,
    joined: Vec<bool>,
}

fn joining() -> &'static Mutex<HashMap<u64, Joining>> {
    static TABLE: OnceLock<Mutex<HashMap<u64, Joining>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// Joins the group named by `handles` (every rank's listen handle, by rank) as `rank`. Refuses handles of another
/// backend or another process.
pub(crate) fn join(handles: &[[u8; HANDLE_BYTES]], rank: usize) -> Result<Arc<Group>> {
    let nranks = handles.len();
    if rank >= nranks {
        return Err(Error::argument(format!("rank {rank} of a connection of {nranks} ranks")));
    }
    let own = std::process::id();
    let mut key = None;
    for (peer, bytes) in handles.iter().enumerate() {
        let handle = Handle::from_bytes(bytes).ok_or_else(|| {
            Error::usage(format!(
                "rank {peer}'s listen handle was not written by weft's loopback backend: every rank must load the \
                 same NCCL_RMA_PLUGIN"
            ))
        })?;
        if handle.process != own {
            return Err(Error::usage(format!(
                "rank {peer} runs in process {}, this rank in process {own}: the loopback backend connects only \
                 ranks that are threads of one process (ranks in several processes need a real RMA network)",
                handle.process
            )));
        }
        key.get_or_insert(handle.nonce);
    }
    let key = key.ok_or_else(|| Error::argument("a connection of no ranks"))?;
    let mut table = joining().lock().unwrap_or_else(|e| e.into_inner());
    let entry = table.entry(key).or_insert_with(|| Joining {
        group: Arc::new(Group { nranks, registrations: Mutex::default(), arrivals: Condvar::new() }),
        joined: vec![false; nranks],
    });
    if entry.group.nranks != nranks {
        return Err(Error::usage(format!(
            "rank {rank} connects {nranks} ranks, a peer connected {} to the same group",
            entry.group.nranks
        )));
    }
    if std::mem::replace(&mut entry.joined[rank], true) {
        return Err(Error::usage(format!("two ranks connected as rank {rank} of one group")));
    }
    let group = Arc::clone(&entry.group);
    if entry.joined.iter().all(|j| *j) {
        table.remove(&key);
    }
    Ok(group)
}

/// Checks a registration's memory type.
pub(crate) fn check_kind(kind: c_int) -> Result<()> {
    match kind {
        ffi::PTR_HOST | ffi::PTR_CUDA => Ok(()),
        other => Err(Error::usage(format!(
            "memory type {other:#x} is neither NCCL_PTR_HOST nor NCCL_PTR_CUDA (the loopback backend has no DMA-BUF)"
        ))),
    }
}
