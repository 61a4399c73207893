set -u -o pipefail
exec > >(tee -a $OUT/log.txt) 2>&1
H=scripts/hang-dump.sh
export WEFT_CACHE_DIR=/tmp/weft-cache RUST_BACKTRACE=1 WEFT_TRACE=1
export WEFT_GPU_NCCL=2.30.7; source .gpu/env.sh
t0=$SECONDS; st() { echo "-- rc=$? at $((SECONDS-t0))s"; }
export WEFT_RANKS=4
echo "== x4 collectives"; $H 30 .gpu/bin/test-gpu --include-ignored every_collective --nocapture > $OUT/coll.txt 2>&1; st; tail -30 $OUT/coll.txt | grep -v "^    \[" | tail -14
echo "== x4 collectives RUNTIME_CONNECT=0"; NCCL_RUNTIME_CONNECT=0 $H 30 .gpu/bin/test-gpu --include-ignored every_collective --nocapture > $OUT/coll0.txt 2>&1; st; grep -v "^    \[" $OUT/coll0.txt | tail -8
echo "== x4 lsa"; $H 30 .gpu/bin/test-gpu_kernels --include-ignored lsa_kernels --nocapture > $OUT/lsa.txt 2>&1; st; grep -v "^    \[" $OUT/lsa.txt | tail -14
echo "== x4 host features"; $H 30 .gpu/bin/test-gpu --include-ignored nccl_2_29 --nocapture > $OUT/feat.txt 2>&1; st; grep -v "^    \[" $OUT/feat.txt | tail -14
unset WEFT_RANKS
echo "== waits"; $H 30 .gpu/bin/test-gpu_waits --include-ignored --nocapture 2>&1 | grep -E "returns|WAITS|result" ; st
