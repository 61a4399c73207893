#!/usr/bin/env bash
# Everything weft can check on a GPU machine, in one call, from the repository root.
#
#   bash scripts/gpu-check.sh                                     every default part below
#   WEFT_GPU_CHECK_PARTS=suite,ranks bash scripts/gpu-check.sh    some of them
#
# To reproduce it on your machine: the test, example and bench binaries are taken from .gpu/bin/ (test-<name>,
# example-<name>); where there is none, scripts/gpu-build.sh builds them there (release mode; it needs Rust, so on a
# GPU machine without it run that script elsewhere and copy .gpu/ over). The NCCL releases come from
# WEFT_NCCL_2_28_HOME and WEFT_NCCL_2_30_HOME (each a directory with lib/libnccl.so.2 and include/ of that release;
# the script sets NCCL_MULTI_RANK_GPU_ENABLE=1 for 2.30), or, where .gpu/env.sh exists (the packing tool of weft's
# own GPU machines writes it), from that script. nvcc comes from CUDA_HOME (default /usr/local/cuda). NVLink
# multicast stays off (NCCL_NVLS_ENABLE=0).
#
# Parts (each on the NCCL release it names):
#   suite     NCCL 2.28.9 (the image's), 1 rank: every test binary with --include-ignored, every example
#   suite30   NCCL 2.30.7, 1 rank: the same
#   ranks     NCCL 2.30.7, WEFT_RANKS=2,4,8 (all on the one GPU), NCCL_LAUNCH_MODE=GROUP (WEFT_GPU_CHECK_LAUNCH_MODE
#             sets another): every multi-rank test (named `…every_rank…`), the fault tests, examples 01-06, 08, 09
#             (each checks f32 and bf16 against its f64 host reference)
#   suite32   NCCL 2.32.3 (the pip wheel cut to sm_90), 1 rank: the same as suite
#   ranks32   NCCL 2.32.3: the same as ranks
#   gin       NCCL 2.30.7 and 2.32.3, weft's loopback GIN backend (docs/gin.md; NCCL_RMA_PLUGIN=.gpu/lib/...): its
#             CUDA engine's GPU test, then at 2, 4 and 8 ranks (WEFT_GPU_CHECK_GIN_RANKS) example 07 (which must gather
#             correctly: no "no GIN" way out), the GIN tests and the GIN fault tests
#   soundness NCCL 2.30.7: the run-time guards of docs/soundness.md at 1 rank (gpu_soundness, gpu_streams,
#             gpu_resources, gpu_bounds), then the multi-rank ones at 2 and 4 ranks
#   overhead  NCCL 2.28.9, 1 rank: launch and all_reduce host overhead (benches dsl and allreduce_overhead), and, where
#             .gpu/base/ holds the same benchmarks built from an earlier commit, those too, alternating (a before/after
#             on one machine)
#   bench     the benchmarks: 1 rank on 2.28.9, 1/2/4/8 ranks on 2.30.7, several ranks with NCCL_LAUNCH_MODE=GROUP
#             (as `ranks`; the block GEMM against cuBLAS at 1 rank;
#             WEFT_GPU_CHECK_QUICK=1: quick mode;
#             WEFT_GPU_CHECK_BENCH_RANKS="4 8": only those rank counts, on 2.30.7)
#   smoke     (not in the default) NCCL 2.30.7: the wait probes, then at 2, 4 and 8 ranks the multi-rank tests (with
#             WEFT_TRACE=1: each rank's steps) and the quickstart, 45 s each at most: a first look at a change
#   bounds    (not in the default) 1 rank: the launch-soundness tests on both releases
#   variants  (not in the default) NCCL 2.30.7, 4 ranks: the collectives test under settings that change what
#             NCCL and CUDA do at a first collective (to find what waits for the device there; docs/multi-rank.md)
#   recheck   (not in the default) examples 03 and 06 at 2/4/8 ranks, then the kernel tests and both at 1 rank on
#             2.28.9: a quick look after a change to launch geometry
#   graphs    (not in the default) the CUDA graph tests with their figures: 1 rank on 2.28.9, 1/2/4/8 on 2.30.7
#   launchers (not in the default) one process per rank under torchrun (python3 -m torch.distributed.run): one
#             process on 2.28.9 and 2.30.7, then 2 and 4 processes sharing the one GPU on 2.30.7 (quickstart and
#             example 03; whether NCCL's multi-rank mode works across processes, which time-slice without MPS)
#   gemm      (not in the default) 1 rank on 2.28.9: the tensor-core tests and the GEMMs against cuBLAS (both
#             with the default mainloops, wgmma on Hopper, then WEFT_GEMM_MAINLOOP=mma_sync), and
#             examples 08 (all-gather + GEMM) and 09 (GEMM + reduce-scatter); both at 2, 4 and 8 ranks on 2.30.7
#   hangs     (not in the default) NCCL 2.30.7: the runs that hung before, once each, for their stacks
#   fresh     (not in the default) what changed since the last GPU run (2026-12-06): frees after a wait gave up
#             and aborts with a deadline: the waits test on both releases, on 2.30.7 the fault tests at 2, 4 and 8
#             ranks, the stuck-abort test, and two runs of the stopping zero_adam case at 8 ranks (does the process
#             now end by itself?); fresh28 and fresh30: only that release's runs
#   stall     (not in the default) NCCL 2.30.7: the benchmark's zero_adam case at 8 ranks in quick mode (it stops at
#             a size's first check run), several times under each setting of WEFT_GPU_CHECK_STALL (see stall())
#   launch    (not in the default) NCCL 2.30.7 with NCCL_LAUNCH_MODE=GROUP (docs/multi-rank.md, "Launch mode"): the
#             spmd fault tests (weft's launch gate) at 2, 4 and 8 ranks, the fused benchmark (quick) at 2, 4 and 8,
#             its zero_adam case at 8 five more times, and the collective and kernel tests and the quickstart at 8
#   stages    (not in the default) NCCL 2.28.9, 1 rank: the tensor-core tests with gemm_tiles on 3 and on 2 stages
#             (WEFT_GEMM_TILES_STAGES: an A100's and a 99-KB GPU's pipelines, run on Hopper), both mainloops
#   children  (not in the default) NCCL 2.30.7: communicators split and shrunk from one whose ranks weft knows
#             (docs/multi-rank.md, "Launch mode"): the split test at 2, 4 and 8 ranks under NCCL_LAUNCH_MODE=GROUP and
#             under NCCL's default, the fault tests (with the split child's gate) and example 02 at 2, 4 and 8 under
#             GROUP; at 1 rank on 2.28.9 the host GPU tests and example 02
#   queues    (not in the default) NCCL 2.30.7: the two runs that still stopped on 2026-12-05 (the graph timing test
#             at 8 ranks, the benchmark's zero_adam case at 4) with 32 hardware queues, several times each, and weft's
#             refusal of 8 queues at 2 ranks
# WEFT_GPU_CHECK_TIMEOUT=s caps every run (default: 300 s, benchmarks 600 s). WEFT_GPU_CHECK_DEADLINE=s skips the
# runs that would start after s seconds (each is listed as skipped), so that the summary and the logs still come back
# from a machine that limits a call's time. WEFT_GPU_CHECK_RANKS="4 8" limits the ranks part to those rank counts.
# Full logs and the benchmarks' CSV/SVG go to one archive, $OUT/gpu-logs.tgz (the device tool brings back few files),
# and a summary (one line per run: name, exit status, last result line) is printed last.
#
# One check over several calls: with WEFT_GPU_CHECK_STATE=DIR (a directory that outlives the call, on the same
# machine: a device tool that keeps the machine warm between calls keeps /tmp), the logs and the summary live in DIR,
# and a run already in its summary with exit status 0 is not run again. So a check longer than one call's time
# limit is the same command repeated (with WEFT_GPU_CHECK_DEADLINE under the limit) until nothing is skipped; the
# last call's summary is the whole check's. A run that failed or was skipped runs again.
set -uo pipefail
parts=",${WEFT_GPU_CHECK_PARTS:-suite,suite30,ranks,bench},"
root=$(pwd)
if [ -n "${WEFT_GPU_CHECK_STATE:-}" ]; then
  out=$WEFT_GPU_CHECK_STATE
  mkdir -p "$out"
  summary="$out/summary.txt"
  touch "$summary"
  # Keep the passed runs; the others run again.
  grep -E ' rc=0 ' "$summary" > "$summary.kept" 2>/dev/null; mv "$summary.kept" "$summary"
  echo "gpu-check: continuing the check in $out ($(wc -l < "$summary") runs passed before)"
else
  out=$(mktemp -d /tmp/weft-gpu-logs.XXXX)
  summary="$out/summary.txt"
  : > "$summary"
fi
# WEFT_STACKS=1: a run killed at its deadline prints every thread's stack first (scripts/symbolize.py names them).
export NCCL_DEBUG=WARN WEFT_CACHE_DIR=/tmp/weft-cache WEFT_STACKS=1
# Ranks that share a GPU as threads of one process need CUDA's 32 hardware queues per context, which CUDA takes from
# the environment when it sets a context up; weft refuses fewer (docs/multi-rank.md, "Hardware queues").
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
[ "${WEFT_GPU_CHECK_QUICK:-0}" = 1 ] && export WEFT_BENCH_QUICK=1
# NCCL's launch mode for the parts `ranks` and `bench` at several ranks: GROUP (what ranks sharing a GPU need,
# docs/multi-rank.md, "Launch mode"), or WEFT_GPU_CHECK_LAUNCH_MODE=PARALLEL for NCCL's default.
launch_mode=${WEFT_GPU_CHECK_LAUNCH_MODE:-GROUP}
# The multi-rank tests and the fault tests; everything else is one rank (or several on several GPUs).
multi_rank_tests=(test-gpu "every_rank" test-gpu_kernels "every_rank" test-gpu_graphs "every_rank" test-gpu_lamport "every_rank" test-gpu_multimem "" test-gpu_faults "" test-gpu_mma "every_rank" test-gpu_resources "every_rank" test-gpu_soundness "every_rank")

run() { # name, timeout (s), command...
  local name=$1 limit=${WEFT_GPU_CHECK_TIMEOUT:-$2}; shift 2
  local started=$SECONDS
  if grep -qF -- "$(printf '%-44s rc=0 ' "$name")" "$summary"; then
    echo "$name: passed in an earlier call of this check (WEFT_GPU_CHECK_STATE)"
    return
  fi
  if [ -n "${WEFT_GPU_CHECK_DEADLINE:-}" ] && [ "$SECONDS" -ge "$WEFT_GPU_CHECK_DEADLINE" ]; then
    printf '%-44s skipped: past WEFT_GPU_CHECK_DEADLINE (%ss)\n' "$name" "$WEFT_GPU_CHECK_DEADLINE" | tee -a "$summary"
    return
  fi
  # A run never outlasts the deadline either.
  if [ -n "${WEFT_GPU_CHECK_DEADLINE:-}" ] && [ $((SECONDS + limit)) -gt "$WEFT_GPU_CHECK_DEADLINE" ]; then
    limit=$((WEFT_GPU_CHECK_DEADLINE - SECONDS))
  fi
  # hang-dump prints every thread's stack (kernel view) before killing a run that passes its limit.
  # Log names keep to letters, digits and . _ - (a device tool may not bring back files with other names).
  local log
  log="$out/$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_').log"
  "$root/scripts/hang-dump.sh" "$limit" "$@" > "$log" 2>&1; local rc=$?
  local last
  last=$(grep -E 'test result:|check against|speedup|FAILED|panicked|Error|error:' "$log" | tail -1 | cut -c1-110)
  printf '%-44s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - started))" "$last" | tee -a "$summary"
  # The logs so far, packed after every run: a call cut short by its time limit still brings them back.
  mkdir -p "${OUT:-.}" && tar czf "${OUT:-.}/gpu-logs.tgz" -C "$out" . 2>/dev/null
}

# One NCCL release's environment, in a subshell per part.
with_nccl() { # release (2.28.9 | 2.30.7 | 2.32.3), command...
  local release=$1; shift
  (
    local home
    if [ "$release" = 2.30.7 ]; then
      home=${WEFT_NCCL_2_30_HOME:-}
      export NCCL_MULTI_RANK_GPU_ENABLE=1
    elif [ "$release" = 2.32.3 ]; then
      home=${WEFT_NCCL_2_32_HOME:-}
      export NCCL_MULTI_RANK_GPU_ENABLE=1
    else
      home=${WEFT_NCCL_2_28_HOME:-}
    fi
    if [ -n "$home" ]; then
      export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} NCCL_HOME="$home" NCCL_NVLS_ENABLE=0
      export PATH="$CUDA_HOME/bin:$PATH" LD_LIBRARY_PATH="$home/lib:$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"
    elif [ -f "$root/.gpu/env.sh" ]; then
      if [ "$release" = 2.28.9 ]; then unset WEFT_GPU_NCCL; else export WEFT_GPU_NCCL=$release; fi
      source "$root/.gpu/env.sh"
    else
      echo "gpu-check: no NCCL $release: set WEFT_NCCL_2_28_HOME / WEFT_NCCL_2_30_HOME to its directory" >&2
      exit 2
    fi
    # The host crate's unit tests open a real libnccl 2.28.9 without a GPU (cargo xtask provisions it on a CPU machine).
    export WEFT_TEST_LIBNCCL_2_28_9=$libnccl_2_28
    # CPU-side compile tests need nvcc and one NCCL header set: the loaded library's own.
    export WEFT_NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" WEFT_CODEGEN_NCCL_INCLUDES="$release=$NCCL_HOME/include"
    "$@"
  )
}

suite() { # tag
  local tag=$1
  # weft_macros is a proc-macro crate: its unit tests link libstd as a dylib and run on the CPU machine only. The
  # codegen test (nvcc compiles every kernel against each NCCL's headers, ~50 s here) needs no GPU: CI runs it, and
  # WEFT_GPU_CHECK_CODEGEN=1 runs it here too.
  local tests="weft_host weft_device gpu gpu_kernels gpu_graphs gpu_lamport gpu_multimem gpu_pdl gpu_mma gpu_flags gpu_bounds"
  tests="$tests gpu_group_outputs gpu_resources gpu_streams gpu_soundness"
  tests="$tests gpu_timeout gpu_waits gpu_faults"
  [ "${WEFT_GPU_CHECK_CODEGEN:-0}" = 1 ] && tests="$tests codegen"
  for t in $tests; do
    [ -x ".gpu/bin/test-$t" ] && run "$tag test-$t" 300 ".gpu/bin/test-$t" --include-ignored --test-threads=1
  done
  for e in .gpu/bin/example-*; do run "$tag $(basename "$e")" 300 "$e"; done
}

ranks() { # release
  local release=$1
  # NCCL launches the rank threads in lock step, as ranks sharing a GPU need (docs/multi-rank.md, "Launch mode").
  export NCCL_LAUNCH_MODE=$launch_mode
  for n in ${WEFT_GPU_CHECK_RANKS:-2 4 8}; do
    export WEFT_RANKS=$n
    local i
    for ((i = 0; i < ${#multi_rank_tests[@]}; i += 2)); do
      local t=${multi_rank_tests[i]} filter=${multi_rank_tests[i + 1]}
      [ -x ".gpu/bin/$t" ] && run "$release x$n $t" 300 ".gpu/bin/$t" --include-ignored --test-threads=1 $filter
    done
    for e in quickstart lifecycle allreduce_bias_residual rmsnorm zero_optimizer moe_dispatch allgather_gemm gemm_reduce_scatter; do
      [ -x ".gpu/bin/example-$e" ] && run "$release x$n example-$e" 300 ".gpu/bin/example-$e"
    done
  done
  unset WEFT_RANKS NCCL_LAUNCH_MODE
}

gin() { # release: the loopback GIN backend (docs/gin.md)
  local release=$1 n
  local plugin="$root/.gpu/lib/libweft_gin_loopback.so"
  [ -f "$plugin" ] || plugin="$root/target/release/libweft_gin_loopback.so"
  export NCCL_RMA_PLUGIN=$plugin NCCL_LAUNCH_MODE=$launch_mode
  [ -x .gpu/bin/test-weft_gin_loopback ] && run "$release test-weft_gin_loopback" 120 \
    .gpu/bin/test-weft_gin_loopback --include-ignored --test-threads=1
  for n in ${WEFT_GPU_CHECK_GIN_RANKS:-2 4 8}; do
    # Each rank its own LSA team, so that GIN's rail team spans the ranks sharing the GPU.
    NCCL_LSA_TEAM_SIZE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET WEFT_RANKS=$n run "$release x$n gin example-gin_ring" 180 \
      bash -c '"$0" | tee /dev/stderr | grep -q "check: every rank holds every rail peer"' .gpu/bin/example-gin_ring
    [ -x .gpu/bin/test-gpu_gin ] && NCCL_LSA_TEAM_SIZE=1 WEFT_RANKS=$n WEFT_TEST_REQUIRE_GIN=1 \
      run "$release x$n test-gpu_gin" 300 .gpu/bin/test-gpu_gin --include-ignored --test-threads=1 --nocapture
    [ -x .gpu/bin/test-gpu_gin_faults ] && NCCL_LSA_TEAM_SIZE=1 WEFT_RANKS=$n WEFT_TEST_REQUIRE_GIN=1 \
      run "$release x$n test-gpu_gin_faults" 300 .gpu/bin/test-gpu_gin_faults --include-ignored --test-threads=1 --nocapture
    # LSA teams of 2 and rails across them: the hybrid kernel's two levels both span ranks.
    [ "$n" -ge 4 ] && [ -x .gpu/bin/test-gpu_gin ] && NCCL_LSA_TEAM_SIZE=2 WEFT_RANKS=$n WEFT_TEST_REQUIRE_GIN=1 \
      run "$release x$n lsa2 test-gpu_gin" 300 .gpu/bin/test-gpu_gin --include-ignored --test-threads=1 --nocapture
  done
  unset NCCL_RMA_PLUGIN NCCL_LAUNCH_MODE
}

soundness() {
  local t
  for t in gpu_soundness gpu_streams gpu_resources gpu_bounds; do
    [ -x ".gpu/bin/test-$t" ] && run "2.30.7 x1 test-$t" 120 ".gpu/bin/test-$t" --include-ignored --test-threads=1 --nocapture
  done
  for n in 2 4; do
    for t in gpu_soundness gpu_resources; do
      [ -x ".gpu/bin/test-$t" ] && WEFT_RANKS=$n NCCL_LAUNCH_MODE=$launch_mode run "2.30.7 x$n test-$t" 120 \
        ".gpu/bin/test-$t" --include-ignored --test-threads=1 --nocapture every_rank
    done
  done
}

overhead() {
  local round b
  for round in 1 2; do
    for b in allreduce_overhead dsl; do
      for side in base bin; do
        local exe
        exe=$(ls .gpu/$side/*"$b"* 2>/dev/null | head -1)
        mkdir -p "$out/overhead-$side-$b-$round"
        [ -x "$exe" ] && WEFT_BENCH_QUICK=1 WEFT_BENCH_OUT="$out/overhead-$side-$b-$round" \
          run "2.28.9 x1 $side $b #$round" 150 "$exe"
      done
    done
  done
}

smoke() {
  run "2.30.7 test-gpu_waits" 60 .gpu/bin/test-gpu_waits --include-ignored --nocapture --test-threads=1
  export WEFT_TRACE=1
  for n in 2 4 8; do
    export WEFT_RANKS=$n
    run "2.30.7 x$n test-gpu" 45 .gpu/bin/test-gpu --include-ignored --test-threads=1 --nocapture every_rank
    run "2.30.7 x$n test-gpu_kernels" 45 .gpu/bin/test-gpu_kernels --include-ignored --test-threads=1 --nocapture every_rank
    run "2.30.7 x$n test-gpu_faults" 45 .gpu/bin/test-gpu_faults --include-ignored --test-threads=1 --nocapture
    run "2.30.7 x$n example-quickstart" 45 .gpu/bin/example-quickstart
  done
  unset WEFT_RANKS WEFT_TRACE
}

bounds() { # release
  run "$1 test-gpu_bounds" 120 .gpu/bin/test-gpu_bounds --include-ignored --test-threads=1
}

variants() {
  export WEFT_RANKS=4 WEFT_TRACE=1
  local t=".gpu/bin/test-gpu --include-ignored --test-threads=1 --nocapture every_collective"
  run "2.30.7 x4 collectives" 45 $t
  CUDA_MODULE_LOADING=EAGER run "2.30.7 x4 collectives MODULE_LOADING=EAGER" 45 $t
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,P2P,NET,ALLOC run "2.30.7 x4 collectives NCCL_DEBUG=INFO" 45 $t
  unset WEFT_RANKS WEFT_TRACE
}

recheck() { # release: examples 03 and 06 (at 2, 4 and 8 ranks on 2.30.7), the kernel tests at 1 rank
  if [ "$1" = 2.30.7 ]; then
    for n in 2 4 8; do
      for e in allreduce_bias_residual moe_dispatch; do
        WEFT_RANKS=$n run "2.30.7 x$n example-$e" 60 ".gpu/bin/example-$e"
      done
    done
  else
    run "$1 test-gpu_kernels" 120 .gpu/bin/test-gpu_kernels --include-ignored --test-threads=1
    for e in allreduce_bias_residual moe_dispatch; do run "$1 example-$e" 60 ".gpu/bin/example-$e"; done
  fi
}

graphs() { # release, rank counts...: the CUDA graph tests, with their output (the graph-vs-eager figures)
  local release=$1; shift
  for n in "$@"; do
    WEFT_RANKS=$n run "$release x$n test-gpu_graphs" 120 .gpu/bin/test-gpu_graphs --include-ignored --test-threads=1 --nocapture
  done
}

launchers() { # release, process counts...: examples under torchrun, one process per rank
  local release=$1; shift
  local torchrun=(python3 -m torch.distributed.run --standalone --no-python)
  for n in "$@"; do
    run "$release torchrun x$n example-quickstart" 120 "${torchrun[@]}" --nproc-per-node "$n" .gpu/bin/example-quickstart
    [ "$n" -gt 1 ] && run "$release torchrun x$n example-allreduce_bias_residual" 180 \
      "${torchrun[@]}" --nproc-per-node "$n" .gpu/bin/example-allreduce_bias_residual
  done
}

gemm() { # release: the tensor-core tests, the GEMM benchmark and example 08 at one rank; on 2.30.7 also 2, 4, 8
  local release=$1
  export LD_LIBRARY_PATH="$(cublas_dirs)${LD_LIBRARY_PATH:-}"
  if [ "$release" = 2.28.9 ]; then
    # Both mainloops of gemm_block and gemm_tiles: the default (wgmma, and TMA for gemm_tiles, on Hopper) and
    # mma.sync (WEFT_GEMM_MAINLOOP=mma_sync): the tensor-core tests, the benchmark against cuBLAS (its gemm_tiles
    # rows are gemm_weft_tma*.csv and gemm_weft_tiles_mma_sync*.csv), example 08.
    run "2.28.9 test-gpu_mma" 300 .gpu/bin/test-gpu_mma --include-ignored --test-threads=1 --nocapture
    WEFT_GEMM_MAINLOOP=mma_sync run "2.28.9 test-gpu_mma mma_sync" 300 .gpu/bin/test-gpu_mma --include-ignored \
      --test-threads=1 --nocapture
    run "2.28.9 test-gpu_flags" 120 .gpu/bin/test-gpu_flags --include-ignored --test-threads=1 --nocapture
    [ -x .gpu/bin/test-gemm ] && WEFT_BENCH_OUT="$out/bench-gemm" run "2.28.9 x1 bench-gemm" 300 .gpu/bin/test-gemm
    [ -x .gpu/bin/test-gemm ] && WEFT_GEMM_MAINLOOP=mma_sync WEFT_BENCH_OUT="$out/bench-gemm-mma_sync" \
      run "2.28.9 x1 bench-gemm mma_sync" 300 .gpu/bin/test-gemm
    run "2.28.9 x1 example-allgather_gemm" 180 .gpu/bin/example-allgather_gemm
    WEFT_GEMM_MAINLOOP=mma_sync run "2.28.9 x1 example-allgather_gemm mma_sync" 180 .gpu/bin/example-allgather_gemm
    run "2.28.9 x1 example-gemm_reduce_scatter" 180 .gpu/bin/example-gemm_reduce_scatter
  else
    local n
    for n in 2 4 8; do
      WEFT_RANKS=$n run "2.30.7 x$n example-allgather_gemm" 180 .gpu/bin/example-allgather_gemm
      WEFT_RANKS=$n run "2.30.7 x$n example-gemm_reduce_scatter" 180 .gpu/bin/example-gemm_reduce_scatter
    done
  fi
}

fresh() { # release: see the header
  local release=$1 n
  # Frees no longer wait again for a stream a wait already gave up on (host/src/cuda.rs, settle_before_free), and
  # a communicator's abort waits at most ABORT_DEADLINE (host/src/comm/mod.rs): the waits test with its new check
  # (a_free_after_a_wait_gave_up_does_not_wait_again) on both releases, the fault tests (frees and aborts after
  # failed collectives), the stuck-abort test and the stopping zero_adam case, whose process should now end about a
  # minute after its ranks' Stalled instead of being killed.
  if [ "$release" = 2.28.9 ]; then
    run "2.28.9 x1 test-gpu_waits" 120 .gpu/bin/test-gpu_waits --include-ignored --nocapture --test-threads=1
  else
    run "2.30.7 x1 test-gpu_waits" 120 .gpu/bin/test-gpu_waits --include-ignored --nocapture --test-threads=1
    for n in 2 4 8; do
      WEFT_RANKS=$n run "2.30.7 x$n test-gpu_faults" 180 .gpu/bin/test-gpu_faults --include-ignored --nocapture \
        --test-threads=1
    done
    # A communicator's abort is bounded (ABORT_DEADLINE): behind a symmetric collective stuck for want of a peer, the
    # abort returns by its deadline (the test runs only when asked: it leaves a kernel on the GPU until its process
    # ends, and the run's limit shows whether that process then ends).
    WEFT_TEST_STUCK_ABORT=1 run "2.30.7 x2 test-gpu_stuck_abort" 60 .gpu/bin/test-gpu_stuck_abort --include-ignored \
      --nocapture
    local i
    for i in 1 2; do
      WEFT_TRACE=1 WEFT_BENCH_QUICK=1 WEFT_BENCH_CASES=zero_adam WEFT_RANKS=8 WEFT_BENCH_SETTLE_S=20 \
        WEFT_BENCH_MARKS=0 run "2.30.7 x8 zero_adam ends #$i" 150 .gpu/bin/test-fused
    done
  fi
}

children() { # release: see the header
  if [ "$1" = 2.28.9 ]; then
    run "2.28.9 test-gpu" 300 .gpu/bin/test-gpu --include-ignored --test-threads=1
    run "2.28.9 example-lifecycle" 120 .gpu/bin/example-lifecycle
    return
  fi
  local n mode
  for mode in GROUP PARALLEL; do
    for n in 2 4 8; do
      NCCL_LAUNCH_MODE=$mode WEFT_RANKS=$n run "2.30.7 x$n $mode test-gpu split" 120 .gpu/bin/test-gpu \
        --include-ignored --test-threads=1 --nocapture split_communicators
    done
  done
  for n in 2 4 8; do
    NCCL_LAUNCH_MODE=GROUP WEFT_RANKS=$n run "2.30.7 x$n GROUP test-gpu_faults" 180 .gpu/bin/test-gpu_faults \
      --include-ignored --test-threads=1 --nocapture
    NCCL_LAUNCH_MODE=GROUP WEFT_RANKS=$n run "2.30.7 x$n GROUP example-lifecycle" 120 .gpu/bin/example-lifecycle
  done
}

launch() { # see the header
  export NCCL_LAUNCH_MODE=GROUP
  local n i
  for n in 2 4 8; do
    WEFT_RANKS=$n run "2.30.7 x$n GROUP test-gpu_faults in_spmd" 120 .gpu/bin/test-gpu_faults --include-ignored \
      --nocapture --test-threads=1 in_spmd
  done
  for n in 2 4 8; do
    WEFT_RANKS=$n WEFT_BENCH_QUICK=1 WEFT_BENCH_OUT="$out/bench-group-x$n" run "2.30.7 x$n GROUP bench-fused" 300 \
      .gpu/bin/test-fused
  done
  for i in 1 2 3 4 5; do
    WEFT_RANKS=8 WEFT_BENCH_QUICK=1 WEFT_BENCH_CASES=zero_adam WEFT_BENCH_SETTLE_S=20 \
      run "2.30.7 x8 GROUP zero_adam $i" 60 .gpu/bin/test-fused
  done
  export WEFT_RANKS=8
  run "2.30.7 x8 GROUP test-gpu" 300 .gpu/bin/test-gpu --include-ignored --test-threads=1 every_rank
  run "2.30.7 x8 GROUP test-gpu_kernels" 300 .gpu/bin/test-gpu_kernels --include-ignored --test-threads=1 every_rank
  run "2.30.7 x8 GROUP example-quickstart" 120 .gpu/bin/example-quickstart
  unset WEFT_RANKS NCCL_LAUNCH_MODE
}

stages() { # see the header
  local stages loop
  for stages in 3 2; do
    for loop in mma_sync wgmma; do
      WEFT_GEMM_TILES_STAGES=$stages WEFT_GEMM_MAINLOOP=$loop run "2.28.9 x1 test-gpu_mma $loop stages=$stages" 300 \
        .gpu/bin/test-gpu_mma --include-ignored --test-threads=1 --nocapture
    done
  done
}

queues() { # the two runs that still stopped on 2026-12-05, with weft's 32 hardware queues: see the header
  # Both stopped with every rank's work enqueued and the device making no progress: the graph timing test at 8 ranks
  # (every rank in cuGraphLaunch) and the fused benchmark's zero_adam case at 4 ranks (every rank waiting for its
  # stream). Streams of different ranks sharing one of CUDA's hardware queues was the cause (docs/multi-rank.md,
  # "Hardware queues": with CUDA_DEVICE_MAX_CONNECTIONS=1 both stopped every time, even at 2 ranks; with 32 none
  # did). This script runs everything with 32, and weft refuses fewer.
  local i
  for i in 1 2 3 4 5 6 7 8; do
    WEFT_RANKS=8 run "2.30.7 x8 test-gpu_graphs #$i" 30 \
      .gpu/bin/test-gpu_graphs --include-ignored --test-threads=1 --nocapture every_rank
  done
  for i in 1 2; do
    WEFT_RANKS=4 WEFT_BENCH_CASES=zero_adam WEFT_BENCH_OUT="$out/bench-x4-zero_adam-$i" \
      run "2.30.7 x4 bench-fused-zero_adam #$i" 90 .gpu/bin/test-fused
  done
  # A rank count that shares queues is refused before anything runs (Error::TooFewQueues), not left to hang.
  CUDA_DEVICE_MAX_CONNECTIONS=8 WEFT_RANKS=2 run "2.30.7 x2 example-quickstart connections=8 (refused)" 60 \
    bash -c '.gpu/bin/example-quickstart > "$0" 2>&1; rc=$?; cat "$0"; [ $rc -ne 0 ] && grep -q "need 32 hardware queues" "$0"' \
    "$out/refused-quickstart.txt"
}

stall() { # the zero_adam stop (docs/multi-rank.md, "The zero_adam stop at 8 ranks"), under settings changing one thing
  # The benchmark's zero_adam case at 8 ranks, quick mode, stops at a size's first check run (f32/bf16, 4 or 64 MB)
  # with every launch enqueued: cuda-gdb showed 7 ranks' ncclReduceScatter kernels resident and spinning and the
  # 8th rank's never dispatched, with 104 of 132 SMs idle. A passing run takes about 15 s; a stopped one ends its
  # check after the 20 s of WEFT_BENCH_SETTLE_S with a line per rank (and with WEFT_TRACE, which step of the unfused
  # run each rank finished) and is killed at 45 s.
  export WEFT_TRACE=1 WEFT_BENCH_QUICK=1 WEFT_BENCH_CASES=zero_adam WEFT_RANKS=8 WEFT_BENCH_SETTLE_S=20
  # The benchmark's events after each unfused step are a setting of their own (marks): the stop came in 1 run of 12
  # with them and in 15 of 19 without (2026-12-06, H100), so every other setting runs without them.
  export WEFT_BENCH_MARKS=0
  # WEFT_GPU_CHECK_STALL (default group,base,marks): which settings run. 2026-12-06 (H100), runs that stopped:
  #   base (none of the below)                             15 of 19 (with eager, nosym, first below: same rate)
  #   marks   WEFT_BENCH_MARKS=1                            1 of 12
  #   (spin   each check run behind a 2-ms spin kernel      1 of 3, at the fused side's check; knob removed)
  #   eager   CUDA_MODULE_LOADING=EAGER                     2 of 3
  #   nosym   NCCL_SYM_KERNEL=none (NCCL's ring kernels)    2 of 3
  #   cga0    NCCL_CGA_CLUSTER_SIZE=0 (no clusters: NCCL's launch sets them for all its kernels) 3 of 3
  #   (first  the unfused side's check first                1 of 1, at the unfused side again; knob removed)
  #   info    NCCL's INFO log, line-buffered; register NCCL_LOCAL_REGISTER=0; connect NCCL_RUNTIME_CONNECT=0:
  #           2 of 3, 4 of 4, 2 of 3 (the day before, without WEFT_BENCH_SETTLE_S)
  #   probe   up to WEFT_GPU_CHECK_PROBE_RUNS (4) runs until one stops, with cuda-gdb's list of the device's kernels
  #           at the stop; the marks with WEFT_GPU_CHECK_PROBE_MARKS=1, NCCL's log of every collective with
  #           WEFT_GPU_CHECK_PROBE_DEBUG=INFO
  #   group   NCCL_LAUNCH_MODE=GROUP: every local rank's kernel is launched before any rank's deviceStream wait is
  #           enqueued (docs/multi-rank.md, "The zero_adam stop at 8 ranks"): 0 of 17 at NCCL's side (the cause;
  #           "Launch mode" there), where base stopped in 3 of 5 that day
  # Since that day the benchmark also lines its ranks up between the launches of a timed batch (every setting).
  local settings=",${WEFT_GPU_CHECK_STALL:-group,base,marks},"
  stall_runs() { # setting, runs, run label, what goes before the binary (variables for env, a wrapper)...
    local setting=$1 runs=$2 label=$3 i; shift 3
    case $settings in *,"$setting",*) ;; *) return ;; esac
    for i in $(seq "$runs"); do run "2.30.7 x8 zero_adam $label #$i" 45 env "$@" .gpu/bin/test-fused; done
  }
  stall_runs group 5 "launch mode group" NCCL_LAUNCH_MODE=GROUP
  stall_runs base 3 base WEFT_BENCH_MARKS=0
  stall_runs marks 4 marks WEFT_BENCH_MARKS=1
  stall_runs eager 3 CUDA_MODULE_LOADING=EAGER CUDA_MODULE_LOADING=EAGER
  stall_runs nosym 3 NCCL_SYM_KERNEL=none NCCL_SYM_KERNEL=none
  stall_runs cga0 3 NCCL_CGA_CLUSTER_SIZE=0 NCCL_CGA_CLUSTER_SIZE=0
  stall_runs info 1 nccl-info NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,REG,COLL stdbuf -oL -eL
  stall_runs register 3 NCCL_LOCAL_REGISTER=0 NCCL_LOCAL_REGISTER=0
  stall_runs connect 3 NCCL_RUNTIME_CONNECT=0 NCCL_RUNTIME_CONNECT=0
  case $settings in *,probe,*)
    local i
    for i in $(seq "${WEFT_GPU_CHECK_PROBE_RUNS:-4}"); do
      # (WEFT_HANG_CUDA_GDB is hang-dump's, so it goes before `run`, not into the command's env.)
      WEFT_HANG_CUDA_GDB=${WEFT_HANG_CUDA_GDB-1} run "2.30.7 x8 zero_adam probe #$i" 60 env \
        WEFT_BENCH_MARKS="${WEFT_GPU_CHECK_PROBE_MARKS:-0}" NCCL_DEBUG="${WEFT_GPU_CHECK_PROBE_DEBUG:-WARN}" \
        NCCL_DEBUG_SUBSYS=COLL,TUNING stdbuf -oL -eL .gpu/bin/test-fused
      tail -1 "$summary" | grep -q ' rc=0 ' || break
    done
  esac
  unset WEFT_TRACE WEFT_BENCH_QUICK WEFT_BENCH_CASES WEFT_RANKS WEFT_BENCH_SETTLE_S WEFT_BENCH_MARKS
}

hangs() { # the runs that hung last time, once each, for their stacks (scripts/symbolize.py)
  export WEFT_TRACE=1
  WEFT_RANKS=2 run "2.30.7 x2 test-gpu" 40 .gpu/bin/test-gpu --include-ignored --test-threads=1 --nocapture every_rank
  WEFT_RANKS=4 run "2.30.7 x4 test-gpu_kernels" 40 .gpu/bin/test-gpu_kernels --include-ignored --test-threads=1 --nocapture every_rank
  WEFT_RANKS=8 run "2.30.7 x8 example-quickstart" 40 .gpu/bin/example-quickstart
  unset WEFT_TRACE
}

cublas_dirs() { # directories holding libcublas.so*, each followed by ':'
  local dirs=("${CUDA_HOME:-/usr/local/cuda}/lib64")
  local site
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    dirs+=("$site"/nvidia/cublas/lib "$site"/nvidia/cu13/lib)
  done
  local d
  for d in "${dirs[@]}"; do compgen -G "$d/libcublas.so*" > /dev/null && printf '%s:' "$d"; done
}

bench() { # release, rank counts...
  local release=$1; shift
  for n in "$@"; do
    export WEFT_RANKS=$n WEFT_BENCH_OUT="$out/bench-$release-x$n"
    # Ranks sharing the GPU launch in NCCL's lock step (docs/multi-rank.md, "Launch mode"); one rank needs nothing.
    if [ "$n" -gt 1 ]; then export NCCL_LAUNCH_MODE=$launch_mode; else unset NCCL_LAUNCH_MODE; fi
    if [ "$n" -ge 4 ]; then
      # At 4 and 8 ranks the whole fused suite can outlast one call: one run per case (each resumable with
      # WEFT_GPU_CHECK_STATE).
      local c
      for c in allreduce allreduce_bias_residual_1shot allreduce_bias_residual_2shot allreduce_bias_residual_lamport \
        rmsnorm zero_adam moe_dispatch_combine; do
        [ -x .gpu/bin/test-fused ] && WEFT_BENCH_CASES=$c WEFT_BENCH_OUT="$out/bench-$release-x$n-$c" \
          run "$release x$n bench-fused-$c" 600 .gpu/bin/test-fused
      done
    else
      [ -x .gpu/bin/test-fused ] && run "$release x$n bench-fused" 600 .gpu/bin/test-fused
    fi
    [ -x .gpu/bin/test-allreduce_overhead ] && run "$release x$n bench-allreduce_overhead" 600 \
      .gpu/bin/test-allreduce_overhead
    # Small sizes, 4 KB to 1 MB: the plain all-reduce (weft's one-shot LSA kernel against ncclAllReduce), and
    # all-reduce + bias + residual with barriers (one-shot) and without (Lamport) against ncclAllReduce + epilogue.
    WEFT_BENCH_OUT="$out/bench-$release-x$n-small" WEFT_BENCH_SIZES=4K,16K,64K,256K,1M \
      WEFT_BENCH_CASES=allreduce,allreduce_bias_residual_1shot,allreduce_bias_residual_lamport \
      run "$release x$n bench-allreduce-small" 300 .gpu/bin/test-fused
    # The same, each side replayed from a CUDA graph (what launch overhead costs at these sizes).
    WEFT_BENCH_OUT="$out/bench-$release-x$n-small-graph" WEFT_BENCH_SIZES=4K,16K,64K,256K,1M WEFT_BENCH_GRAPH=1 \
      WEFT_BENCH_CASES=allreduce,allreduce_bias_residual_1shot,allreduce_bias_residual_lamport \
      run "$release x$n bench-allreduce-small-graph" 300 .gpu/bin/test-fused
    [ "$n" = 1 ] && [ -x .gpu/bin/test-dsl ] && run "$release x1 bench-dsl" 600 .gpu/bin/test-dsl
    # The block GEMM against cuBLAS (libcublas from the CUDA toolkit or PyTorch's wheels).
    [ "$n" = 1 ] && [ -x .gpu/bin/test-gemm ] && LD_LIBRARY_PATH="$(cublas_dirs)${LD_LIBRARY_PATH:-}" \
      WEFT_BENCH_OUT="$out/bench-$release-x1" run "$release x1 bench-gemm" 300 .gpu/bin/test-gemm
  done
  unset WEFT_RANKS WEFT_BENCH_OUT NCCL_LAUNCH_MODE
}

if [ ! -d .gpu/bin ]; then
  if [ -f .gpu/bin.tar.xz ]; then tar -C .gpu -xJf .gpu/bin.tar.xz; else bash "$root/scripts/gpu-build.sh" || exit 2; fi
fi
# NCCL 2.28.9's library, for the unit tests that need one whichever release a part runs on.
libnccl_2_28=$(if [ -n "${WEFT_NCCL_2_28_HOME:-}" ]; then echo "$WEFT_NCCL_2_28_HOME/lib/libnccl.so.2"
  elif [ -f .gpu/env.sh ]; then (unset WEFT_GPU_NCCL; source .gpu/env.sh >/dev/null 2>&1; echo "${NCCL_HOME:-}/lib/libnccl.so.2"); fi)
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$out/gpu.txt"
case $parts in *,smoke,*) with_nccl 2.30.7 smoke ;; esac
case $parts in *,bounds,*) with_nccl 2.30.7 bounds 2.30.7; with_nccl 2.28.9 bounds 2.28.9 ;; esac
case $parts in *,recheck,*) with_nccl 2.30.7 recheck 2.30.7; with_nccl 2.28.9 recheck 2.28.9 ;; esac
case $parts in *,hangs,*) with_nccl 2.30.7 hangs ;; esac
case $parts in *,fresh,*) with_nccl 2.28.9 fresh 2.28.9; with_nccl 2.30.7 fresh 2.30.7 ;; esac
case $parts in *,fresh30,*) with_nccl 2.30.7 fresh 2.30.7 ;; esac
case $parts in *,fresh28,*) with_nccl 2.28.9 fresh 2.28.9 ;; esac
case $parts in *,queues,*) with_nccl 2.30.7 queues ;; esac
case $parts in *,stall,*) with_nccl 2.30.7 stall ;; esac
case $parts in *,stages,*) with_nccl 2.28.9 stages ;; esac
case $parts in *,launch,*) with_nccl 2.30.7 launch ;; esac
case $parts in *,children,*) with_nccl 2.30.7 children 2.30.7; with_nccl 2.28.9 children 2.28.9 ;; esac
case $parts in *,gemm,*) with_nccl 2.28.9 gemm 2.28.9; with_nccl 2.30.7 gemm 2.30.7 ;; esac
case $parts in *,launchers,*) with_nccl 2.28.9 launchers 2.28.9 1; with_nccl 2.30.7 launchers 2.30.7 1 2 4 ;; esac
case $parts in *,graphs,*) with_nccl 2.28.9 graphs 2.28.9 1; with_nccl 2.30.7 graphs 2.30.7 1 2 4 8 ;; esac
case $parts in *,variants,*) with_nccl 2.30.7 variants ;; esac
case $parts in *,suite,*) with_nccl 2.28.9 suite 2.28.9 ;; esac
case $parts in *,suite30,*) with_nccl 2.30.7 suite 2.30.7 ;; esac
case $parts in *,ranks,*) with_nccl 2.30.7 ranks 2.30.7 ;; esac
case $parts in *,soundness,*) with_nccl 2.30.7 soundness ;; esac
case $parts in *,overhead,*) with_nccl 2.28.9 overhead ;; esac
case $parts in *,gin,*) with_nccl 2.30.7 gin 2.30.7; with_nccl 2.32.3 gin 2.32.3 ;; esac
case $parts in *,gin30,*) with_nccl 2.30.7 gin 2.30.7 ;; esac
case $parts in *,suite32,*) with_nccl 2.32.3 suite 2.32.3 ;; esac
case $parts in *,ranks32,*) with_nccl 2.32.3 ranks 2.32.3 ;; esac
case $parts in
  *,bench,*)
    # WEFT_GPU_CHECK_BENCH_RANKS="4 8": only those rank counts, on 2.30.7 (to finish a bench run cut short).
    if [ -n "${WEFT_GPU_CHECK_BENCH_RANKS:-}" ]; then
      with_nccl 2.30.7 bench 2.30.7 $WEFT_GPU_CHECK_BENCH_RANKS
    else
      with_nccl 2.28.9 bench 2.28.9 1; with_nccl 2.30.7 bench 2.30.7 1 2 4 8
    fi ;;
esac

echo "=== summary"
cat "$summary"
failed=$(awk '$0 ~ / rc=/ { for (i = 1; i <= NF; i++) if ($i ~ /^rc=/ && $i != "rc=0") n++ } END { print n + 0 }' "$summary")
echo "runs that failed: $failed"
mkdir -p "${OUT:-.}" && tar czf "${OUT:-.}/gpu-logs.tgz" -C "$out" .
[ "$failed" = 0 ]
