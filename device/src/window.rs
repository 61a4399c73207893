//! Symmetric memory windows and views of them.

use core::marker::PhantomData;
use core::ops::{Index, IndexMut};

use crate::comm::Team;
use crate::device_only;
use crate::numeric::Element;

/// A symmetric memory window of `T` elements: a buffer registered with NCCL (`ncclCommWindowRegister`) that every
/// rank has at the same offset, so peers can address each other's copy.
///
/// Kernels take it as `x: &Window<T>`; in C++ it is `weft::Window<T> { ncclWindow_t win; size_t offset_bytes;
/// size_t len; }` (kernel ABI). Element `i` of a peer's copy is `x.lsa(peer)[i]`; this rank's is `x.local()[i]`.
#[derive(Debug)]
pub struct Window<T> {
    _device_only: PhantomData<T>,
}

/// A plain pointer view into one rank's copy of a [`Window`]: `view[i]` loads or stores element `i` (bounds
/// unchecked on the GPU). C++ `weft::View<T>` (`T* ptr; size_t len;`).
///
/// Views are values: `x.lsa(peer)[i] = v;` stores into the peer's memory.
#[derive(Debug)]
pub struct WindowView<'w, T> {
    _window: PhantomData<&'w Window<T>>,
}

impl<T: Element> Window<T> {
    /// Elements in the window (from its offset on). C++ `w.len()`.
    pub fn len(&self) -> usize {
        device_only("Window::len")
    }

    /// Whether the window has no elements. C++ `w.is_empty()`.
    pub fn is_empty(&self) -> bool {
        device_only("Window::is_empty")
    }

    /// The same window starting `elements` elements further in (and that many shorter): how a kernel names a
    /// part of a window for a put, a reduce-copy or another view. C++ `w.offset(elements)`.
    pub fn offset(&self, elements: usize) -> Window<T> {
        device_only("Window::offset")
    }

    /// This rank's own copy (`ncclGetLocalPointer`). C++ `w.local()`.
    pub fn local(&self) -> WindowView<'_, T> {
        device_only("Window::local")
    }

    /// LSA peer `peer`'s copy, `peer` in `0..dev.lsa_size()` (`ncclGetLsaPointer`). C++ `w.lsa(peer)`.
    pub fn lsa(&self, peer: u32) -> WindowView<'_, T> {
        device_only("Window::lsa")
    }

    /// The copy of rank `peer` of `team`, which must lie inside the LSA team
    /// (`ncclGetPeerPointer(win, offset, team, peer)`). C++ `w.peer(team, peer)`.
    pub fn peer(&self, team: Team, peer: u32) -> WindowView<'_, T> {
        device_only("Window::peer")
    }
}

impl<T: Element> WindowView<'_, T> {
    /// Elements in the view (the window's length). C++ `view.len()`.
    pub fn len(&self) -> usize {
        device_only("WindowView::len")
    }

    /// Whether the view has no elements. C++ `view.is_empty()`.
    pub fn is_empty(&self) -> bool {
        device_only("WindowView::is_empty")
    }
}

impl<T: Element> Index<usize> for WindowView<'_, T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        device_only("WindowView[]")
    }
}

impl<T: Element> IndexMut<usize> for WindowView<'_, T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        device_only("WindowView[]")
    }
}
