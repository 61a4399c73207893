//! Kernel launches: argument packing and the launch itself.
