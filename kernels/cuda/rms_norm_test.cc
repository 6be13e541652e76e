// RMSNorm on the device against a scalar double-precision reference.
#include "kernels/cuda/rms_norm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"

namespace ringmoe::cuda {
namespace {

#define ASSERT_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

std::vector<double> ReferenceRmsNorm(const std::vector<float>& x,
                                     const std::vector<float>& w, int rows,
                                     int cols, double eps) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int c = 0; c < cols; ++c)
      sum += double(x[r * cols + c]) * x[r * cols + c];
    double scale = 1.0 / std::sqrt(sum / cols + eps);
    for (int c = 0; c < cols; ++c)
      y[r * cols + c] = x[r * cols + c] * scale * w[c];
  }
  return y;
}

TEST(RmsNormCudaTest, MatchesDoubleReferenceOnRaggedShapes) {
  if (ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int shapes[][2] = {{1, 1},
                           {3, 7},
                           {5, 33},
                           {17, 4095},
                           {2, 8191},
                           {64, 129},
                           // Whole float4s: the vectorized path.
                           {1, 4},
                           {7, 2048},
                           {3, 1028}};
  for (const auto& shape : shapes) {
    const int rows = shape[0], cols = shape[1];
    std::vector<float> x(rows * cols), w(cols);
    for (auto& v : x) v = normal(rng) * 0.05f;
    for (auto& v : w) v = 1.f + 0.1f * normal(rng);
    float *dx, *dw, *dy;
    ASSERT_CUDA_OK(cudaMalloc(&dx, x.size() * sizeof(float)));
    ASSERT_CUDA_OK(cudaMalloc(&dw, w.size() * sizeof(float)));
    ASSERT_CUDA_OK(cudaMalloc(&dy, x.size() * sizeof(float)));
    ASSERT_CUDA_OK(
        cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    ASSERT_CUDA_OK(
        cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    // Poison the output so an unwritten element cannot pass.
    ASSERT_CUDA_OK(cudaMemset(dy, 0xff, x.size() * sizeof(float)));
    ASSERT_CUDA_OK(LaunchRmsNormF32(dx, dw, dy, rows, cols, 1e-6f, nullptr));
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> y(x.size());
    ASSERT_CUDA_OK(
        cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    auto ref = ReferenceRmsNorm(x, w, rows, cols, 1e-6);
    double err = 0, norm = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << "element " << i;
      err += (y[i] - ref[i]) * (y[i] - ref[i]);
      norm += ref[i] * ref[i];
    }
    EXPECT_LE(std::sqrt(err / norm), 1e-5) << rows << "x" << cols;
  }
}

}  // namespace
}  // namespace ringmoe::cuda
