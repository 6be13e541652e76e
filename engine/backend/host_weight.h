// Host weights as the CPU kernels see them: the conversions between the
// engine's Weight and kernels::Matrix, for the CPU backend and for what
// works on weights in host memory at load time (quantization).
#ifndef RINGMOE_ENGINE_BACKEND_HOST_WEIGHT_H_
#define RINGMOE_ENGINE_BACKEND_HOST_WEIGHT_H_

#include "engine/backend/weight.h"
#include "kernels/cpu/matrix.h"

namespace ringmoe::backend {

// The CPU kernels' view of a weight in host memory.
kernels::Matrix AsMatrix(const Weight& w);
// A host matrix as a weight in host memory.
Weight AsWeight(const kernels::Matrix& m);

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_HOST_WEIGHT_H_
