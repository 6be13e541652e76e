// The CUDA kernels against scalar double-precision references on random,
// ragged inputs. Skips without a CUDA device.
#include "kernels/cuda/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"

namespace ringmoe::cuda {
namespace {

#define ASSERT_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}

template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

std::vector<float> Random(std::mt19937& rng, size_t n, float scale = 1.f) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

double RelError(const std::vector<float>& got,
                const std::vector<double>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    e += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return std::sqrt(e / n);
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  }
  std::mt19937 rng_{42};
};

TEST_F(CudaOpsTest, MatMulBf16) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  for (auto [n, rows, cols] :
       {std::tuple{1, 33, 65}, {7, 129, 96}, {37, 200, 131}}) {
    auto xf = Random(rng_, n * cols), wf = Random(rng_, rows * cols, 0.1f);
    std::vector<__nv_bfloat16> x(xf.size()), w(wf.size());
    for (size_t i = 0; i < xf.size(); ++i) x[i] = __float2bfloat16(xf[i]);
    for (size_t i = 0; i < wf.size(); ++i) w[i] = __float2bfloat16(wf[i]);
    auto *dx = ToDevice(x), *dw = ToDevice(w);
    __nv_bfloat16* dy;
    ASSERT_CUDA_OK(cudaMalloc(&dy, n * rows * sizeof(__nv_bfloat16)));
    ASSERT_CUDA_OK(cudaMemset(dy, 0xff, n * rows * sizeof(__nv_bfloat16)));
    ASSERT_EQ(MatMulBf16(handle, dx, n, dw, rows, cols, dy),
              CUBLAS_STATUS_SUCCESS);
    auto y = ToHost(dy, n * rows);
    std::vector<float> got(y.size());
    std::vector<double> want(y.size());
    for (int i = 0; i < n; ++i) {
      for (int r = 0; r < rows; ++r) {
        double acc = 0;
        for (int c = 0; c < cols; ++c) {
          acc += double(__bfloat162float(x[i * cols + c])) *
                 __bfloat162float(w[r * cols + c]);
        }
        want[i * rows + r] = acc;
        got[i * rows + r] = __bfloat162float(y[i * rows + r]);
      }
    }
    EXPECT_LE(RelError(got, want), 1e-2) << n << "x" << rows << "x" << cols;
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
  }
  cublasDestroy(handle);
}

TEST_F(CudaOpsTest, SiluMulAndRotary) {
  const int64_t n = 1000 + 37;
  auto gate = Random(rng_, n), up = Random(rng_, n);
  auto *dg = ToDevice(gate), *du = ToDevice(up);
  float* dout;
  ASSERT_CUDA_OK(cudaMalloc(&dout, n * sizeof(float)));
  ASSERT_CUDA_OK(LaunchSiluMulF32(dg, du, n, dout, nullptr));
  auto out = ToHost(dout, n);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i)
    want[i] = gate[i] / (1 + std::exp(-double(gate[i]))) * up[i];
  EXPECT_LE(RelError(out, want), 1e-5);

  const int tokens = 5, heads = 3, head_dim = 18;
  auto x = Random(rng_, tokens * heads * head_dim);
  std::vector<int32_t> pos = {0, 1, 17, 300, 4095};
  std::vector<float> inv(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j)
    inv[j] = std::pow(10000.0, -2.0 * j / head_dim);
  auto* dx = ToDevice(x);
  auto* dp = ToDevice(pos);
  auto* di = ToDevice(inv);
  ASSERT_CUDA_OK(
      LaunchRotaryHalfF32(dx, tokens, heads, head_dim, dp, di, 1.f, nullptr));
  auto y = ToHost(dx, x.size());
  std::vector<double> ref(x.size());
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      for (int j = 0; j < head_dim / 2; ++j) {
        const double a = double(pos[t]) * inv[j];
        const float* v = &x[(t * heads + h) * head_dim];
        ref[(t * heads + h) * head_dim + j] =
            v[j] * std::cos(a) - v[j + 9] * std::sin(a);
        ref[(t * heads + h) * head_dim + j + 9] =
            v[j + 9] * std::cos(a) + v[j] * std::sin(a);
      }
    }
  }
  EXPECT_LE(RelError(y, ref), 1e-5);
  for (void* p :
       {(void*)dg, (void*)du, (void*)dout, (void*)dx, (void*)dp, (void*)di})
    cudaFree(p);
}

TEST_F(CudaOpsTest, RouterTopK) {
  for (auto [tokens, experts, k, renorm] :
       {std::tuple{3, 8, 2, true}, {17, 60, 4, false}, {9, 129, 8, true}}) {
    auto logits = Random(rng_, tokens * experts, 2.f);
    auto* dl = ToDevice(logits);
    int32_t* dc;
    float* dw;
    ASSERT_CUDA_OK(cudaMalloc(&dc, tokens * k * sizeof(int32_t)));
    ASSERT_CUDA_OK(cudaMalloc(&dw, tokens * k * sizeof(float)));
    ASSERT_CUDA_OK(
        LaunchRouterTopK(dl, tokens, experts, k, renorm, dc, dw, nullptr));
    auto chosen = ToHost(dc, tokens * k);
    auto weights = ToHost(dw, tokens * k);
    for (int t = 0; t < tokens; ++t) {
      const float* row = &logits[t * experts];
      std::vector<int> order(experts);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return row[a] > row[b]; });
      double z = 0, picked = 0;
      for (int e = 0; e < experts; ++e) z += std::exp(double(row[e]));
      for (int r = 0; r < k; ++r) picked += std::exp(double(row[order[r]])) / z;
      for (int r = 0; r < k; ++r) {
        EXPECT_EQ(chosen[t * k + r], order[r]);
        double p = std::exp(double(row[order[r]])) / z;
        if (renorm) p /= picked;
        EXPECT_NEAR(weights[t * k + r], p, 1e-5);
      }
    }
    cudaFree(dl);
    cudaFree(dc);
    cudaFree(dw);
  }
}

TEST_F(CudaOpsTest, PagedAttentionDecode) {
  const int seqs = 3, heads = 6, kv_heads = 2, head_dim = 20, block = 7,
            max_blocks = 9;
  const std::vector<int32_t> lengths = {1, 13, 60};
  const int64_t row = kv_heads * head_dim, stride = block * row;
  const int num_blocks = seqs * max_blocks;
  auto k = Random(rng_, num_blocks * stride),
       v = Random(rng_, num_blocks * stride);
  std::vector<int32_t> table(seqs * max_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng_);
  auto q = Random(rng_, seqs * heads * head_dim);
  auto *dq = ToDevice(q), *dk = ToDevice(k), *dv = ToDevice(v);
  auto *dt = ToDevice(table), *dl = ToDevice(lengths);
  float* dout;
  ASSERT_CUDA_OK(cudaMalloc(&dout, q.size() * sizeof(float)));
  const float scale = 1.f / std::sqrt(float(head_dim));
  ASSERT_CUDA_OK(LaunchPagedAttentionDecode(
      dq, dk, dv, dt, dl, seqs, heads, kv_heads, head_dim, block, max_blocks,
      stride, scale, dout, nullptr));
  auto out = ToHost(dout, q.size());
  std::vector<double> want(q.size(), 0);
  for (int s = 0; s < seqs; ++s) {
    for (int h = 0; h < heads; ++h) {
      const int g = h / (heads / kv_heads);
      std::vector<double> sc(lengths[s]);
      double mx = -1e300, z = 0;
      auto at = [&](const std::vector<float>& c, int p, int d) {
        return c[table[s * max_blocks + p / block] * stride +
                 (p % block) * row + g * head_dim + d];
      };
      for (int p = 0; p < lengths[s]; ++p) {
        double dot = 0;
        for (int d = 0; d < head_dim; ++d)
          dot += double(q[(s * heads + h) * head_dim + d]) * at(k, p, d);
        sc[p] = dot * scale;
        mx = std::max(mx, sc[p]);
      }
      for (auto& x : sc) z += (x = std::exp(x - mx));
      for (int p = 0; p < lengths[s]; ++p) {
        for (int d = 0; d < head_dim; ++d)
          want[(s * heads + h) * head_dim + d] += sc[p] / z * at(v, p, d);
      }
    }
  }
  EXPECT_LE(RelError(out, want), 1e-5);
  for (void* p :
       {(void*)dq, (void*)dk, (void*)dv, (void*)dt, (void*)dl, (void*)dout})
    cudaFree(p);
}

}  // namespace
}  // namespace ringmoe::cuda
