//! weft-host (placeholder)
