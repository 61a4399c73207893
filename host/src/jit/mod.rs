//! Run-time compilation of generated CUDA C++ with nvcc, and the on-disk cubin cache.
