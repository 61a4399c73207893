#!/usr/bin/env bash
# Runs a command with a deadline; if it is still running then, prints every thread's stack (gdb if present, else the
# process's own dump when it runs with WEFT_STACKS=1, then the kernel's view from /proc) before killing it, so a hang
# on the GPU machine says where it hung.
#   scripts/hang-dump.sh SECONDS command [args...]
limit=$1; shift
"$@" &
pid=$!
for ((i = 0; i < limit * 10; i++)); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 0.1
done
echo "hang-dump: '$*' still running after ${limit}s; stacks of pid $pid:"
# WEFT_HANG_CUDA_GDB=1: first, where cuda-gdb is installed, its list of the kernels on the device and where their
# blocks are (which ranks' kernels are resident tells a deadlock among them from work that never started), and every
# host thread's frames (libcuda's and NCCL's exported names included).
if [ -n "${WEFT_HANG_CUDA_GDB:-}" ]; then
  cuda_gdb=$(command -v cuda-gdb || ls "${CUDA_HOME:-/usr/local/cuda}"/bin/cuda-gdb /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
  if [ -n "$cuda_gdb" ]; then
    echo "hang-dump: $cuda_gdb: the device's kernels"
    timeout 150 "$cuda_gdb" -batch -p "$pid" -ex "info cuda kernels" -ex "info cuda blocks" -ex "thread apply all bt 12" \
      2>&1 | grep -vE '^\[(New (Thread|LWP)|Thread debugging)' | cut -c1-200 | head -600
  else
    echo "hang-dump: no cuda-gdb here (WEFT_HANG_CUDA_GDB)"
  fi
fi
if command -v gdb >/dev/null; then
  gdb -batch -p "$pid" -ex "thread apply all bt 25" 2>/dev/null | grep -E '^(Thread|#)' | cut -c1-160
else
  # A weft process run with WEFT_STACKS=1 prints each thread's return addresses on SIGUSR2 (host/src/stacks.rs);
  # scripts/symbolize.py names them. Then the kernel's view.
  kill -USR2 "$pid" 2>/dev/null && sleep 3
  for t in /proc/"$pid"/task/*; do
    echo "thread $(basename "$t") $(cat "$t/comm") wchan=$(cat "$t/wchan" 2>/dev/null)"
    sed 's/^/    /' "$t/stack" 2>/dev/null | head -8
  done
fi
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit 124
