// ringmoe devices: the CPU (its instruction sets and the path each kernel
// takes on it) and the CUDA devices.
#include <cstdio>
#include <string>
#include <thread>

#include "clients/cli/commands.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/device_info.h"

namespace ringmoe::cli {
namespace {

// "f32 avx2, bf16 avx2, ..., mxfp4 avx2": the product path per weight type
// for n activation rows.
std::string ProductPaths(int64_t n) {
  using kernels::WeightType;
  std::string out;
  for (WeightType t : {WeightType::kF32, WeightType::kBF16, WeightType::kF16,
                       WeightType::kInt8, WeightType::kInt4,
                       WeightType::kFp8E4M3, WeightType::kMxfp4}) {
    if (!out.empty()) out += ", ";
    out += std::string(kernels::WeightTypeName(t)) + " " +
           kernels::KernelPathName(kernels::ProductPath(t, n));
  }
  return out;
}

void PrintCpu() {
  std::printf("cpu: %s, %u hardware threads\n", kernels::CpuBrand().c_str(),
              std::thread::hardware_concurrency());
  std::string present, absent;
  for (const kernels::CpuFeature& f : kernels::CpuFeatures()) {
    std::string& list = f.present ? present : absent;
    list += list.empty() ? f.name : std::string(" ") + f.name;
  }
  std::printf("  instruction sets: %s\n", present.c_str());
  std::printf("  absent: %s\n", absent.empty() ? "none" : absent.c_str());
  std::printf("  kernel paths:\n");
  std::printf("    products, 1 activation row: %s\n", ProductPaths(1).c_str());
  // Where the paths change with the row count: mxfp4's integer products
  // (AVX-512 where the CPU has it) end after DirectProductRows(kMxfp4)
  // rows, bf16's AVX-512 products after DirectProductRows(kBF16).
  const long long few = kernels::DirectProductRows(kernels::WeightType::kMxfp4);
  const long long direct =
      kernels::DirectProductRows(kernels::WeightType::kBF16);
  std::printf("    products, 2-%lld activation rows: %s\n", few,
              ProductPaths(2).c_str());
  std::printf("    products, %lld-%lld activation rows: %s\n", few + 1, direct,
              ProductPaths(few + 1).c_str());
  std::printf("    products, %lld+ activation rows: %s\n", direct + 1,
              ProductPaths(direct + 1).c_str());
  std::printf(
      "    bf16 products, --activation_precision=bf16: %s\n",
      kernels::KernelPathName(kernels::ProductPath(
          kernels::WeightType::kBF16, 1, kernels::ActivationPrecision::kBf16)));
  std::printf(
      "    attention (decode, prefill), norms, softmax, rotary, silu: %s\n",
      kernels::KernelPathName(kernels::VectorPath()));
  if (const char* forced = kernels::ForcedPathName()) {
    std::printf("  forced onto the %s path by RINGMOE_FORCE_%s=1\n", forced,
                std::string(forced) == "scalar" ? "SCALAR" : "AVX2");
  }
}

}  // namespace

int RunDevices() {
  PrintCpu();
  std::string why;
  auto devices = cuda::ListDevices(&why);
  if (devices.empty()) {
    std::printf("no CUDA devices: %s\n", why.c_str());
    return 0;
  }
  for (const auto& d : devices) {
    std::printf("cuda:%d  %s  sm_%d%d  %.1f GiB  %d SMs\n", d.index,
                d.name.c_str(), d.compute_major, d.compute_minor,
                d.total_memory_bytes / double(1 << 30), d.multiprocessors);
    const cuda::DeviceCeilings c = cuda::MeasureCeilings(d.index);
    std::printf(
        "  measured: host->device %.1f GB/s (pinned), device copy %.0f GB/s "
        "(read + write), float32 products %.1f TFLOP/s\n",
        c.host_to_device_bytes_per_s / 1e9, c.device_copy_bytes_per_s / 1e9,
        c.sgemm_flops_per_s / 1e12);
  }
  return 0;
}

}  // namespace ringmoe::cli
