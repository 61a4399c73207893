/* Input to bindgen for the NCCL 2.28 layouts of the structs whose layout changed in later releases. */
#include <nccl.h>
#include <nccl_device.h>
