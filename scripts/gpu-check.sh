#!/usr/bin/env bash
# Everything weft can check on a GPU machine, in one call: run from the repository root there after
# `../shared/tools/gpu-pack` packed the binaries into .gpu/ (the device tool carries .gpu). Full logs and the
# benchmarks' CSV/SVG go to one archive, $OUT/gpu-logs.tgz (the device tool brings back few files), and a short
# summary is printed last. WEFT_GPU_CHECK_QUICK=1 runs the benchmarks in quick mode.
set -uo pipefail
source .gpu/env.sh
out=$(mktemp -d /tmp/weft-gpu-logs.XXXX)
export NCCL_DEBUG=WARN WEFT_CACHE_DIR=/tmp/weft-cache WEFT_BENCH_OUT="$out"
# CPU-side compile tests need nvcc and one NCCL header set; the machine's own match its libnccl.
export WEFT_NVCC=${WEFT_NVCC:-/usr/local/cuda/bin/nvcc}
export WEFT_CODEGEN_NCCL_INCLUDES=${WEFT_CODEGEN_NCCL_INCLUDES:-"$(python3 -c 'import nvidia.nccl as m, re; p=list(m.__path__)[0]; v=re.search(r"NCCL_VERSION_CODE (\d+)", open(p+"/include/nccl.h").read()).group(1); print(f"{int(v)//10000}.{int(v)//100%100}.{int(v)%100}={p}/include")')"}
summary=()
run() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-28s rc=%-3s %s' "$name" "$rc" "$(grep -E 'test result:|passed|FAILED|speedup|check' "$out/$name.log" | tail -1 | cut -c1-90)")")
}
# weft_macros is a proc-macro crate: its unit tests link libstd as a dylib and run on the CPU machine only.
for t in weft_host weft_device gpu gpu_kernels gpu_timeout codegen; do
  run "test-$t" 300 .gpu/bin/test-$t --include-ignored --test-threads=1
done
for e in .gpu/bin/example-*; do run "$(basename "$e")" 300 "$e"; done
[ "${WEFT_GPU_CHECK_QUICK:-0}" = 1 ] && export WEFT_BENCH_QUICK=1
for b in dsl fused allreduce_overhead; do [ -x .gpu/bin/test-$b ] && run "bench-$b" 600 .gpu/bin/test-$b; done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
tar czf "${OUT:-.}/gpu-logs.tgz" -C "$out" .
