//! Which streams use a [`DeviceBuffer`](super::DeviceBuffer), and the order between them.
//!
//! A buffer may be used on several streams: kernels and collectives on the stream they are given, CUDA graphs on
//! their replay stream, stream waits on flags. Two things must hold for every use, whatever the stream:
//!
//! - **Order.** A use on stream B comes after the pending writes on every other stream, and a write on B after
//!   every pending use on them (B waits, on the device, for an event of each such stream): cudarc's rule for its
//!   `CudaSlice`, kept for every stream rather than only the last reader and writer.
//! - **Frees.** The buffer's drop waits for every stream that used it, each to the point of its last use.
//!
//! Each stream gets an entry the first time it uses the buffer. A stream weft was handed as an `Arc` (launches,
//! graph replays, stream waits, and the buffer's own stream) is *held*: its uses are only marked (an atomic or a
//! flag, no driver call), an event is recorded on it only when another stream must wait for it, and the drop waits
//! for the whole stream. A stream weft only borrowed (collectives, cudarc's `DevicePtr` traits) gets an event
//! recorded after each use, as cudarc does for its own buffers. Uses on the buffer's own stream while no other
//! stream ever used it cost one atomic operation.
//!
//! A CUDA graph that records the buffer *claims* it for its replay stream for as long as the graph lives
//! ([`StreamUses::claim`]): replays are enqueued later, where no use on another stream can wait for them nor they
//! for it, so while a claim lives an asynchronous use on another stream that conflicts with the graph's (either
//! writes) is refused, and so is a second graph that would conflict on another stream. Host copies wait for the
//! claims' replay streams instead.
//!
//! Uses of one buffer from several threads at once are ordered by the order in which their calls take the
//! buffer's lock; uses whose calls overlap in time may run concurrently, as the host's own calls did.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use cudarc::driver::{CudaEvent, CudaStream, SyncOnDrop};

use crate::error::Error;

/// How a use touches the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Only reads it.
    Read,
    /// May write it.
    Write,
}

const USED: u8 = 1;
const WROTE: u8 = 2;

fn marks(access: Access) -> u8 {
    match access {
        Access::Read => USED,
        Access::Write => USED | WROTE,
    }
}

fn key(stream: &CudaStream) -> usize {
    stream.cu_stream() as usize
}

/// The streams that used one buffer (module docs).
pub(crate) struct StreamUses {
    own: Arc<CudaStream>,
    /// Marks of uses on `own` not yet covered by `State::own_event`.
    own_marks: AtomicU8,
    /// Whether any other stream used the buffer or a graph claimed it: then every use takes the lock.
    shared: AtomicBool,
    /// A tracking step failed (an event could not be created or recorded): the uses are not all known, so the drop
    /// leaks the memory rather than free it under a use it cannot wait for.
    lost: AtomicBool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Recorded on `own` when another stream must wait for its uses; covers them up to then.
    own_event: Option<CudaEvent>,
    /// A write among the uses `own_event` covers that no later write elsewhere has ordered.
    own_event_wrote: bool,
    /// Marks of the graph replays on `own` (never marked one by one: every decision counts them as pending).
    own_replays: u8,
    /// One entry per other stream. Boxed: the guard of a borrowed stream's use records into the entry's event after
    /// the enqueue, through a reference that must stay valid while entries are added.
    #[allow(clippy::vec_box)] // the box, not the vector, keeps each event's address (see above)
    others: Vec<Box<Other>>,
    claims: Vec<Claim>,
    /// Streams with uses noted for the drop only ([`StreamUses::note_unordered`]); boxed like `others`.
    #[allow(clippy::vec_box)] // the box, not the vector, keeps each event's address
    unordered: Vec<Box<Unordered>>,
}

struct Unordered {
    key: usize,
    held: Option<Arc<CudaStream>>,
    event: CudaEvent,
    recorded: bool,
}

struct Other {
    key: usize,
    held: Option<Arc<CudaStream>>,
    event: CudaEvent,
    /// Whether `event` was ever recorded.
    recorded: bool,
    /// Held streams: marks of uses since `event` was last recorded.
    pending: u8,
    /// Marks of graph replays on this stream: pending at every decision, since replays are not marked one by one.
    replays: u8,
    /// A write among the uses `event` covers that no later write elsewhere has ordered.
    wrote: bool,
}

/// A live graph's claim: its replays on `replay` use the buffer.
struct Claim {
    graph: Weak<()>,
    replay: Arc<CudaStream>,
    wrote: bool,
}

impl std::fmt::Debug for StreamUses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("StreamUses")
            .field("other_streams", &state.others.len())
            .field("graph_claims", &state.claims.len())
            .finish()
    }
}

/// The replay stream of a live claim that a use on `stream` with `access` conflicts with: another stream, and one
/// of the two writes.
fn conflict(claims: impl IntoIterator<Item = (usize, bool)>, stream: usize, access: Access) -> Option<usize> {
    claims.into_iter().find(|&(replay, wrote)| replay != stream && (wrote || access == Access::Write)).map(|c| c.0)
}

impl StreamUses {
    pub(crate) fn new(own: &Arc<CudaStream>) -> StreamUses {
        StreamUses {
            own: own.clone(),
            own_marks: AtomicU8::new(0),
            shared: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Orders a use on `stream` with `access` after the conflicting uses on other streams (stream waits), notes it,
    /// and returns the guard to drop once the use is enqueued (it records the use where the stream is borrowed).
    /// `held` is `stream` as an `Arc`, when the caller has one. Fails, with nothing enqueued, when a live graph's
    /// claim conflicts or a driver call fails.
    pub(crate) fn begin<'a>(
        &'a self,
        stream: &'a CudaStream,
        held: Option<&Arc<CudaStream>>,
        access: Access,
    ) -> Result<SyncOnDrop<'a>, Error> {
        if key(stream) == key(&self.own) && !self.shared.load(Ordering::Acquire) {
            self.own_marks.fetch_or(marks(access), Ordering::AcqRel);
            return Ok(SyncOnDrop::Record(None));
        }
        let mut state = self.lock();
        self.refuse_conflict(&mut state, stream, access)?;
        self.order_after_others(&mut state, stream, access).inspect_err(|_| self.lose())?;
        self.note(&mut state, stream, held, access).inspect_err(|_| self.lose())
    }

    /// Notes a read on `stream` for the drop only: it is neither ordered after other streams' writes nor waited
    /// for by later uses or host copies. For a stream wait on flags that a kernel on another stream raises while it
    /// runs (`DeviceBuffer::stream_wait_at_least`: the writer must not wait for the reader, which waits for it), and
    /// for the callers of [`DeviceBuffer::device_ptr_unordered`](super::DeviceBuffer::device_ptr_unordered), who
    /// order it themselves. The drop still waits for it.
    pub(crate) fn note_unordered<'a>(
        &'a self,
        stream: &'a CudaStream,
        held: Option<&Arc<CudaStream>>,
    ) -> Result<SyncOnDrop<'a>, Error> {
        if key(stream) == key(&self.own) {
            // The drop waits for the buffer's own stream anyway.
            return Ok(SyncOnDrop::Record(None));
        }
        let mut state = self.lock();
        let found = state.unordered.iter().position(|entry| entry.key == key(stream));
        let index = match found {
            Some(index) => index,
            None => {
                let event = stream.context().new_event(None).inspect_err(|_| self.lose())?;
                let entry = Unordered { key: key(stream), held: None, event, recorded: false };
                state.unordered.push(Box::new(entry));
                state.unordered.len() - 1
            }
        };
        let entry = &mut state.unordered[index];
        if entry.held.is_none() {
            entry.held = held.filter(|held| key(held) == key(stream)).cloned();
        }
        if entry.held.is_some() {
            return Ok(SyncOnDrop::Record(None));
        }
        if !stream.context().is_managing_stream_synchronization() {
            return Ok(SyncOnDrop::Sync(Some(stream)));
        }
        entry.recorded = true;
        let event: *const CudaEvent = &entry.event;
        // SAFETY: as in `note`: a boxed entry, never removed, replaced or moved while `self` lives.
        let event = unsafe { &*event };
        Ok(SyncOnDrop::Record(Some((event, stream))))
    }

    /// Claims the buffer for the replays of a graph (alive while `graph` is) on `replay`: refused if another live
    /// graph's claim or use conflicts (module docs); otherwise `replay` first waits for the conflicting uses on other
    /// streams, so every replay comes after them.
    pub(crate) fn claim(&self, graph: &Arc<()>, replay: &Arc<CudaStream>, access: Access) -> Result<(), Error> {
        let mut state = self.lock();
        self.shared.store(true, Ordering::Release);
        self.refuse_conflict(&mut state, replay, access)?;
        self.order_after_others(&mut state, replay, access).inspect_err(|_| self.lose())?;
        drop(self.note(&mut state, replay, Some(replay), access).inspect_err(|_| self.lose())?);
        if key(replay) == key(&self.own) {
            state.own_replays |= marks(access);
        } else if let Some(other) = state.others.iter_mut().find(|other| other.key == key(replay)) {
            other.replays |= marks(access);
        }
        if !state.claims.iter().any(|c| Weak::ptr_eq(&c.graph, &Arc::downgrade(graph))) {
            state.claims.push(Claim { graph: Arc::downgrade(graph), replay: replay.clone(), wrote: false });
        }
        let claim = state.claims.iter_mut().find(|c| Weak::ptr_eq(&c.graph, &Arc::downgrade(graph)));
        if let Some(claim) = claim {
            claim.wrote |= access == Access::Write;
        }
        Ok(())
    }

    fn refuse_conflict(&self, state: &mut State, stream: &CudaStream, access: Access) -> Result<(), Error> {
        state.claims.retain(|claim| claim.graph.strong_count() > 0);
        match conflict(state.claims.iter().map(|c| (key(&c.replay), c.wrote)), key(stream), access) {
            None => Ok(()),
            Some(_) => Err(Error::invalid(
                "buffer",
                format!(
                    "a live CUDA graph replaying on another stream records this buffer, and this use or the graph \\
                     writes it: {} on a stream other than the replays' could run alongside a replay. Use it on the \\
                     graph's replay stream (`Graph::stream`), read or write it from the host with `Graph::read` / \\
                     `Graph::write`, or drop the graph first",
                    if access == Access::Write { "writing it" } else { "reading it" }
                ),
            )),
        }
    }

    /// Makes `stream` wait for the pending uses on other streams that a use with `access` must follow: their writes,
    /// and for a write every use. Held streams get their event recorded now.
    fn order_after_others(&self, state: &mut State, stream: &CudaStream, access: Access) -> Result<(), Error> {
        let write = access == Access::Write;
        if key(stream) != key(&self.own) {
            let own = self.own_marks.swap(0, Ordering::AcqRel) | state.own_replays;
            if own & USED != 0 {
                let event = match &mut state.own_event {
                    Some(event) => event,
                    slot => slot.insert(self.own.context().new_event(None)?),
                };
                event.record(&self.own)?;
                state.own_event_wrote |= own & WROTE != 0;
            }
            if let Some(event) = &state.own_event {
                if write || state.own_event_wrote {
                    stream.wait(event)?;
                }
            }
            if write {
                state.own_event_wrote = false;
            }
        }
        for other in state.others.iter_mut().filter(|other| other.key != key(stream)) {
            let pending = other.pending | other.replays;
            if let (Some(held), true) = (&other.held, pending & USED != 0) {
                other.event.record(held)?;
                other.recorded = true;
                other.wrote |= pending & WROTE != 0;
                other.pending = 0;
            }
            if other.recorded && (write || other.wrote) {
                stream.wait(&other.event)?;
            }
            if write {
                // This write now follows it: later uses wait for this write instead.
                other.wrote = false;
            }
        }
        Ok(())
    }

    /// Notes the use on `stream`: marks for held streams, the returned guard records the event for borrowed ones.
    fn note<'a>(
        &'a self,
        state: &mut State,
        stream: &'a CudaStream,
        held: Option<&Arc<CudaStream>>,
        access: Access,
    ) -> Result<SyncOnDrop<'a>, Error> {
        if key(stream) == key(&self.own) {
            self.own_marks.fetch_or(marks(access), Ordering::AcqRel);
            return Ok(SyncOnDrop::Record(None));
        }
        self.shared.store(true, Ordering::Release);
        let index = match state.others.iter().position(|other| other.key == key(stream)) {
            Some(index) => index,
            None => {
                let event = stream.context().new_event(None)?;
                state.others.push(Box::new(Other {
                    key: key(stream),
                    held: None,
                    event,
                    recorded: false,
                    pending: 0,
                    replays: 0,
                    wrote: false,
                }));
                state.others.len() - 1
            }
        };
        let other = &mut state.others[index];
        if other.held.is_none() {
            other.held = held.filter(|held| key(held) == key(stream)).cloned();
        }
        if other.held.is_some() {
            other.pending |= marks(access);
            return Ok(SyncOnDrop::Record(None));
        }
        if !stream.context().is_managing_stream_synchronization() {
            // cudarc's guard records only while cudarc tracks events (more than one stream, tracking not turned off):
            // without that, wait for the use itself before the guard returns.
            return Ok(SyncOnDrop::Sync(Some(stream)));
        }
        other.recorded = true;
        other.wrote |= access == Access::Write;
        let event: *const CudaEvent = &other.event;
        // SAFETY: the event lives in a boxed entry that is never removed, replaced or moved out of its box while
        // `self` lives (entries are only ever added, and the box stays put when the vector grows), and `'a` borrows
        // `self`; `CudaEvent::record` takes `&self`, so sharing it with the state's other readers is fine.
        let event = unsafe { &*event };
        Ok(SyncOnDrop::Record(Some((event, stream))))
    }

    fn lose(&self) {
        self.lost.store(true, Ordering::Release);
    }

    /// Records that a tracking step failed where no error could be returned (cudarc's `DevicePtr` traits).
    pub(crate) fn lost_track(&self, error: &Error) {
        tracing::error!(%error, "tracking a device buffer's use failed; its memory will be leaked, not freed");
        self.lose();
    }

    /// Waits, on the host, for what a host copy must follow: the buffer's own stream, and on other streams (graph
    /// replays included) their writes, and when the host writes, every use. Polling, never the whole device.
    pub(crate) fn settle_for_host(&self, access: Access) -> Result<(), Error> {
        let mut state = self.lock();
        // The claims' replay streams are held entries, their replays counted as pending.
        for other in state.others.iter_mut() {
            let needed = access == Access::Write || other.wrote || (other.pending | other.replays) & WROTE != 0;
            match (&other.held, needed) {
                (Some(held), true) => crate::cuda::settle(held)?,
                (None, true) if other.recorded => crate::cuda::settle_event(&other.event, crate::cuda::SETTLE_TIMEOUT)?,
                _ => {}
            }
            if access == Access::Write {
                // Done, and the host's write is done before any later use is enqueued.
                other.wrote = false;
                other.pending &= !WROTE;
            }
        }
        drop(state);
        crate::cuda::settle(&self.own)
    }

    /// Waits for every use on every stream, before the memory is freed ([`crate::cuda::settle_before_free`]: a
    /// stream a wait already gave up on fails at once). Fails if a use was not tracked: the caller leaks.
    pub(crate) fn settle_before_free(&self) -> Result<(), Error> {
        if self.lost.load(Ordering::Acquire) {
            return Err(Error::invalid("buffer", "a use of the buffer could not be tracked, so its end is unknown"));
        }
        let state = self.lock();
        let entries = state.others.iter().map(|o| (&o.held, &o.event, o.recorded));
        let unordered = state.unordered.iter().map(|u| (&u.held, &u.event, u.recorded));
        for (held, event, recorded) in entries.chain(unordered) {
            match held {
                Some(held) => crate::cuda::settle_before_free(held)?,
                None if recorded => crate::cuda::settle_event(event, crate::cuda::SETTLE_TIMEOUT)?,
                None => {}
            }
        }
        drop(state);
        crate::cuda::settle_before_free(&self.own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_graph_pins_conflicting_uses_to_its_replay_stream() {
        let (replay, other) = (1usize, 2usize);
        // A graph that writes the buffer: no use on another stream, read or write.
        assert_eq!(conflict([(replay, true)], other, Access::Read), Some(replay));
        assert_eq!(conflict([(replay, true)], other, Access::Write), Some(replay));
        assert_eq!(conflict([(replay, true)], replay, Access::Write), None, "its own stream orders them");
        // A graph that only reads it: other streams may read alongside, not write.
        assert_eq!(conflict([(replay, false)], other, Access::Read), None);
        assert_eq!(conflict([(replay, false)], other, Access::Write), Some(replay));
        // Two graphs: the second on another stream conflicts as an eager use would.
        assert_eq!(conflict([(replay, false), (other, true)], replay, Access::Read), Some(other));
        assert_eq!(conflict([], other, Access::Write), None);
    }

    #[test]
    fn marks_say_what_a_use_did() {
        assert_eq!(marks(Access::Read), USED);
        assert_eq!(marks(Access::Write), USED | WROTE);
    }
}
