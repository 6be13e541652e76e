#include "kernels/cpu/cpu_features.h"

#include <unistd.h>

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

bool CpuHasAvx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool SetInEnvironment(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool& ForceScalar() {
  static bool force = SetInEnvironment("RINGMOE_FORCE_SCALAR");
  return force;
}

bool& ForceAvx2() {
  static bool force = SetInEnvironment("RINGMOE_FORCE_AVX2");
  return force;
}

}  // namespace

bool UseAvx2() {
  static const bool has_avx2 = CpuHasAvx2();
  return has_avx2 && !ForceScalar();
}

bool UseAvx512() {
  static const bool has_avx512 = CpuHasAvx512();
  return has_avx512 && UseAvx2() && !ForceAvx2();
}

void SetForceScalar(bool force) { ForceScalar() = force; }

void SetForceAvx2(bool force) { ForceAvx2() = force; }

int64_t L1DataCacheBytes() {
  static const int64_t bytes = [] {
    const long reported = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return reported > 0 ? static_cast<int64_t>(reported) : int64_t{32} << 10;
  }();
  return bytes;
}

}  // namespace ringmoe::kernels
