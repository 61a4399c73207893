//! weft-device (placeholder)
#![forbid(unsafe_code)]
