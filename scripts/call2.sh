set -u -o pipefail
L=$OUT/log.txt
exec > >(tee -a $L) 2>&1
H=scripts/hang-dump.sh
export WEFT_CACHE_DIR=/tmp/weft-cache RUST_BACKTRACE=1
source .gpu/env.sh
t0=$SECONDS; st() { echo "-- rc=$? at $((SECONDS-t0))s"; }
which gdb; echo "== 2.28.9 identity"; $H 40 .gpu/bin/test-gpu --include-ignored identity_and_properties --nocapture 2>&1 | tail -4; st
echo "== 2.28.9 waits"; $H 50 .gpu/bin/test-gpu_waits --include-ignored --nocapture 2>&1 | tail -40; st
export WEFT_GPU_NCCL=2.30.7; source .gpu/env.sh
echo "== 2.30.7 identity"; $H 40 .gpu/bin/test-gpu --include-ignored identity_and_properties --nocapture 2>&1 | tail -4; st
echo "== 2.30.7 x2 spmd"; WEFT_RANKS=2 NCCL_DEBUG=INFO NCCL_DEBUG_FILE=$OUT/nccl-x2.%p $H 60 .gpu/bin/test-gpu --include-ignored spmd_runs_one --nocapture 2>&1 | tail -30; st
echo "== 2.30.7 x2 quickstart"; WEFT_RANKS=2 $H 60 .gpu/bin/example-quickstart 2>&1 | tail -16; ok=$?; st
[ $ok = 0 ] || exit 0
for n in 4 8; do export WEFT_RANKS=$n
echo "== x$n gpu"; $H 60 .gpu/bin/test-gpu --include-ignored --test-threads=1 every_rank 2>&1 | tail -8; st
echo "== x$n kernels"; $H 60 .gpu/bin/test-gpu_kernels --include-ignored --test-threads=1 every_rank 2>&1 | tail -8; st
echo "== x$n quickstart"; $H 60 .gpu/bin/example-quickstart 2>&1 | tail -14; st
done
echo "== x4 host features"; WEFT_RANKS=4 $H 60 .gpu/bin/test-gpu --include-ignored nccl_2_29 --nocapture 2>&1 | tail -14; st
echo "== x2 faults"; WEFT_RANKS=2 $H 90 .gpu/bin/test-gpu_faults --include-ignored --test-threads=1 2>&1 | tail -12; st
echo "== done"
