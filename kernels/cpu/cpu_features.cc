#include "kernels/cpu/cpu_features.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

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

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool CpuHasAvx512Vbmi() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vbmi");
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

int64_t CacheBytes(int name, int64_t fallback) {
  const long reported = sysconf(name);
  return reported > 0 ? static_cast<int64_t>(reported) : fallback;
}

bool HasAvx2() {
  static const bool has = CpuHasAvx2();
  return has;
}

bool HasAvx512() {
  static const bool has = CpuHasAvx512();
  return has;
}

bool HasAvx512Bf16() {
  static const bool has = CpuHasAvx512Bf16();
  return has;
}

bool HasAvx512Vbmi() {
  static const bool has = CpuHasAvx512Vbmi();
  return has;
}

}  // namespace

bool UseAvx2() { return HasAvx2() && !ForceScalar(); }

bool UseAvx512() { return HasAvx512() && UseAvx2() && !ForceAvx2(); }

bool UseAvx512Bf16() { return HasAvx512Bf16() && UseAvx512(); }

bool UseAvx512Bf16Vbmi() { return HasAvx512Vbmi() && UseAvx512Bf16(); }

std::vector<CpuFeature> CpuFeatures() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // __builtin_cpu_supports takes literal names only, hence the repetition.
  return {
      {"sse4_2", __builtin_cpu_supports("sse4.2") != 0},
      {"avx", __builtin_cpu_supports("avx") != 0},
      {"avx2", __builtin_cpu_supports("avx2") != 0},
      {"fma", __builtin_cpu_supports("fma") != 0},
      {"f16c", __builtin_cpu_supports("f16c") != 0},
      {"avx512f", __builtin_cpu_supports("avx512f") != 0},
      {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
      {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
      {"avx512_vnni", __builtin_cpu_supports("avx512vnni") != 0},
      {"avx512_bf16", __builtin_cpu_supports("avx512bf16") != 0},
      {"avx512vbmi", __builtin_cpu_supports("avx512vbmi") != 0},
  };
#else
  return {};
#endif
}

std::string CpuBrand() {
#if defined(__x86_64__)
  unsigned int regs[12];
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    for (unsigned int leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002u + leaf, &regs[4 * leaf], &regs[4 * leaf + 1],
                  &regs[4 * leaf + 2], &regs[4 * leaf + 3]);
    }
    char brand[sizeof(regs) + 1] = {};
    std::memcpy(brand, regs, sizeof(regs));
    std::string name(brand);
    const size_t begin = name.find_first_not_of(' ');
    const size_t end = name.find_last_not_of(' ');
    if (begin != std::string::npos) return name.substr(begin, end - begin + 1);
  }
#endif
  return "unknown";
}

const char* ForcedPathName() {
  if (ForceScalar() && HasAvx2()) return "scalar";
  if (ForceAvx2() && HasAvx512() && UseAvx2()) return "avx2";
  return nullptr;
}

void SetForceScalar(bool force) { ForceScalar() = force; }

void SetForceAvx2(bool force) { ForceAvx2() = force; }

namespace internal {
int weight_prefetch[static_cast<int>(WeightType::kMxfp4) + 1] = {};
}  // namespace internal

WeightPrefetch GetWeightPrefetch(WeightType type) {
  return static_cast<WeightPrefetch>(__atomic_load_n(
      &internal::weight_prefetch[static_cast<int>(type)], __ATOMIC_RELAXED));
}

void SetWeightPrefetch(WeightType type, WeightPrefetch prefetch) {
  __atomic_store_n(&internal::weight_prefetch[static_cast<int>(type)],
                   static_cast<int>(prefetch), __ATOMIC_RELAXED);
}

const char* WeightPrefetchName(WeightPrefetch prefetch) {
  return prefetch == WeightPrefetch::kHardwareOnly ? "hardware" : "software";
}

int64_t L1DataCacheBytes() {
  static const int64_t bytes = CacheBytes(_SC_LEVEL1_DCACHE_SIZE, 32 << 10);
  return bytes;
}

int64_t L2CacheBytes() {
  static const int64_t bytes = CacheBytes(_SC_LEVEL2_CACHE_SIZE, 512 << 10);
  return bytes;
}

int64_t L3CacheBytes() {
  static const int64_t bytes = CacheBytes(_SC_LEVEL3_CACHE_SIZE, 32 << 20);
  return bytes;
}

}  // namespace ringmoe::kernels
