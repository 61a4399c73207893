/* Input to bindgen for weft-host's sys layer: the host API of NCCL (nccl.h) and the host part of the
 * device API (communicator properties, device communicators, teams, requirement builders). */
#include <nccl.h>
#include <nccl_device/host.h>
