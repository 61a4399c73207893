// The timeout form of an LSA barrier wait when a member never arrives, on one GPU (tests/gpu_kernels.rs).
//
// NCCL refuses two ranks of one communicator on one GPU, and on one rank the LSA team has a single member, so no
// real peer can stay away. This kernel builds one: a barrier over the one-rank LSA team re-declared with two
// members. Member 1 does not exist and never arrives. The kernel does not arrive either (an arrive would store into
// member 1's inbox, which is not mapped); it only waits, through weft's bounded wait, which polls this rank's own
// inbox slot for member 1: NCCL's layout puts it at word 3·nBarriers + index·2 + 1 of the barrier resources (the
// slot of barrier 2·index + 1 on a one-rank team, never written there), inside the buffer when nBarriers > 2·grid.
// Expected: every block reports "timed out" (1) after `timeout_ns`, the barrier's epoch is written back unchanged,
// and the device communicator's barriers keep working.
#include "weft.cuh"

extern "C" __global__ void phantom_peer_wait(ncclDevComm dev, unsigned long long timeout_ns, uint32_t* outcome) {
  ncclTeam team = ncclTeamLsa(dev);
  team.nRanks = 2;  // rank 0 (this one) and the phantom, rank 1
  weft::LsaBarrier<weft::Cta> bar(dev, weft::Cta{}, team, blockIdx.x);
  weft::BarrierResult result = bar.wait_timeout(weft::Cta{}, weft::Order::Acquire, timeout_ns);
  if (threadIdx.x == 0) outcome[blockIdx.x] = result.is_ok() ? 0u : result.is_timed_out() ? 1u : 2u;
}
