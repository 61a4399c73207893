// Attack: build the host's LL all-to-all handle by hand, to pass a made-up resource-buffer handle and slot count to
// a kernel's `LlA2aHandle` parameter (tests/ui/forged_ll_a2a_handle.rs tries the device vocabulary's struct). Its
// fields are private: only `DevComm::ll_a2a_handle` makes one.
#![forbid(unsafe_code)]

fn forge() {
    let raw = weft_host::sys::ncclLLA2AHandle { _bindgen_opaque_blob: [7, 1 << 20] };
    let _forged = weft_host::devcomm::LlA2aHandle { raw, owner: 0, dev: std::marker::PhantomData };
}

fn main() {}
