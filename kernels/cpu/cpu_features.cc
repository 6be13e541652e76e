#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace ringmoe::kernels {
namespace {

bool CpuHasAvx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool ForcedByEnvironment() {
  const char* v = std::getenv("RINGMOE_FORCE_SCALAR");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool& ForceScalar() {
  static bool force = ForcedByEnvironment();
  return force;
}

}  // namespace

bool UseAvx2() {
  static const bool has_avx2 = CpuHasAvx2();
  return has_avx2 && !ForceScalar();
}

void SetForceScalar(bool force) { ForceScalar() = force; }

}  // namespace ringmoe::kernels
