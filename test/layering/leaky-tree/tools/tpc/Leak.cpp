// tools/ linking the CUDA backend directly (it is a plugin); the ABI header is allowed.
#include "runtime/cuda/CudaPlugin.h"
#include "runtime/cuda/CudaSession.h"
