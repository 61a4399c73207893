//! weft-macros (placeholder)
#![forbid(unsafe_code)]
