#!/usr/bin/env bash
# Prints sizeof/offsetof of the structs whose layout weft keys on the release (host/src/abi.rs), for the headers
# of each NCCL release given (default: every published release with the device API), as nvcc sees them on x86-64.
# Needs `cargo xtask provision` first (for nvcc and pip). GDAKI is switched off: 2.28.7 includes DOCA headers the
# wheel lacks, and no measured struct depends on it. Downloads each release's wheel into a temporary folder.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
toolchain="${WEFT_TOOLCHAIN_DIR:-$root/target/weft-toolchain}"
cuda="$(echo "$toolchain"/venv/lib/python3*/site-packages/nvidia/cu13)"
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(2.28.3 2.28.7 2.28.9 2.29.2 2.29.3 2.29.7 2.30.3 2.30.4 2.30.7 2.31.2 2.32.3)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/probe.cu" <<'CU'
#include <cstdio>
#include <cstddef>
#include <nccl.h>
#include <nccl_device.h>
#define P(name, value) printf(" %s=%zu", name, (size_t)(value))
int main() {
  printf("%d:", NCCL_VERSION_CODE);
  P("config", sizeof(ncclConfig_t));
  P("requirements", sizeof(ncclDevCommRequirements_t));
  P("devcomm", sizeof(ncclDevComm));
  P("devcomm_align", alignof(ncclDevComm));
  P("resource_req", sizeof(ncclDevResourceRequirements_t));
#if NCCL_VERSION_CODE >= 22900
  P("properties", sizeof(ncclCommProperties_t));
  P("props.ginType@", offsetof(ncclCommProperties_t, ginType));
  P("props.ginType#", sizeof(((ncclCommProperties_t*)0)->ginType));
#endif
#if NCCL_VERSION_CODE >= 23100
  P("props.devCommRuntimeVersionSize@", offsetof(ncclCommProperties_t, devCommRuntimeVersionSize));
#endif
  printf("\n");
  return 0;
}
CU
for release in "${releases[@]}"; do
  "$toolchain/venv/bin/pip" download --quiet --no-deps --only-binary=:all: -d "$work/$release" "nvidia-nccl-cu13==$release"
  (cd "$work/$release" && unzip -q ./*.whl 'nvidia/nccl/include/*')
  "$cuda/bin/nvcc" -x cu -std=c++17 -I "$work/$release/nvidia/nccl/include" -I "$cuda/include" -I "$cuda/include/cccl" \
    -DNCCL_GIN_GDAKI_ENABLE=0 "$work/probe.cu" -o "$work/probe-$release" -L "$cuda/lib" -lcudart_static -ldl -lrt -lpthread
  printf '%s ' "$release"
  "$work/probe-$release"
  rm -rf "${work:?}/$release"
done
