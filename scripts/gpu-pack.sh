#!/usr/bin/env bash
# Packs what the GPU machine runs into .gpu/: every test, example and bench binary with the NCCL releases
# (../shared/tools/gpu-pack, arguments passed on), and weft's loopback GIN backend (.gpu/lib/libweft_gin_loopback.so,
# which scripts/gpu-check.sh hands NCCL as NCCL_RMA_PLUGIN). Carry .gpu to the GPU machine.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
"$root/../shared/tools/gpu-pack" "$@"
cargo build --release -p weft-gin-loopback
mkdir -p .gpu/lib
cp target/release/libweft_gin_loopback.so .gpu/lib/
strip .gpu/lib/libweft_gin_loopback.so 2>/dev/null || true
du -sh .gpu | awk '{print "packed with the loopback GIN backend: " $1}'
