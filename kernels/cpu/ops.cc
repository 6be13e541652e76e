#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/numeric.h"

namespace ringmoe::kernels {
namespace {

template <typename Widen>
void MatMulRows(const float* x, int64_t n, const Matrix& w, float* y,
                Widen widen) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) row[c] = widen(r * w.cols + c);
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * w.cols;
      float acc = 0.f;
      for (int64_t c = 0; c < w.cols; ++c) acc += xi[c] * row[c];
      y[i * w.rows + r] = acc;
    }
  }
}

}  // namespace

int WeightTypeSize(WeightType type) {
  return type == WeightType::kF32 ? 4 : 2;
}

void ReadRow(const Matrix& w, int64_t row, float* out) {
  const int64_t base = row * w.cols;
  switch (w.type) {
    case WeightType::kF32:
      std::copy_n(static_cast<const float*>(w.data) + base, w.cols, out);
      break;
    case WeightType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + base;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = Bf16ToF32(p[c]);
      break;
    }
    case WeightType::kF16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + base;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = F16ToF32(p[c]);
      break;
    }
  }
}

void MatMulTransposed(const float* x, int64_t n, const Matrix& w, float* y) {
  switch (w.type) {
    case WeightType::kF32: {
      const auto* p = static_cast<const float*>(w.data);
      MatMulRows(x, n, w, y, [p](int64_t i) { return p[i]; });
      break;
    }
    case WeightType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(w.data);
      MatMulRows(x, n, w, y, [p](int64_t i) { return Bf16ToF32(p[i]); });
      break;
    }
    case WeightType::kF16: {
      const auto* p = static_cast<const uint16_t*>(w.data);
      MatMulRows(x, n, w, y, [p](int64_t i) { return F16ToF32(p[i]); });
      break;
    }
  }
}

void AddBias(float* y, int64_t n, int64_t dim, const float* bias) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < dim; ++d) y[i * dim + d] += bias[d];
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim,
             float eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;
    float sum = 0.f;
    for (int64_t d = 0; d < dim; ++d) sum += xi[d] * xi[d];
    const float scale = 1.f / std::sqrt(sum / static_cast<float>(dim) + eps);
    float* yi = y + i * dim;
    for (int64_t d = 0; d < dim; ++d) yi[d] = xi[d] * scale * weight[d];
  }
}

void ApplyRotaryHalf(float* x, int64_t num_heads, int64_t head_dim,
                     const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t j = 0; j < half; ++j) {
      const float a = v[j], b = v[j + half];
      v[j] = a * cos[j] - b * sin[j];
      v[j + half] = b * cos[j] + a * sin[j];
    }
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float max = *std::max_element(x, x + n);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

void TopK(const float* x, int64_t n, int k, int32_t* indices) {
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  k = static_cast<int>(std::min<int64_t>(k, n));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [x](int32_t a, int32_t b) {
                      return x[a] > x[b] || (x[a] == x[b] && a < b);
                    });
  std::copy_n(order.begin(), k, indices);
}

void AttendOneQuery(const float* q, int64_t num_heads, int64_t num_kv_heads,
                    int64_t head_dim, const KvBlocks& kv,
                    int64_t first_position, int64_t end_position, float scale,
                    float* out) {
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_width = num_kv_heads * head_dim;
  const int64_t num_positions = end_position - first_position;
  std::vector<float> scores(num_positions);
  for (int64_t h = 0; h < num_heads; ++h) {
    const float* qh = q + h * head_dim;
    const int64_t kv_offset = (h / group) * head_dim;
    for (int64_t i = 0; i < num_positions; ++i) {
      const int64_t p = first_position + i;
      const float* k = kv.k_blocks[p / kv.block_size] +
                       (p % kv.block_size) * row_width + kv_offset;
      float dot = 0.f;
      for (int64_t d = 0; d < head_dim; ++d) dot += qh[d] * k[d];
      scores[i] = dot * scale;
    }
    Softmax(scores.data(), num_positions);
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.f);
    for (int64_t i = 0; i < num_positions; ++i) {
      const int64_t p = first_position + i;
      const float* v = kv.v_blocks[p / kv.block_size] +
                       (p % kv.block_size) * row_width + kv_offset;
      for (int64_t d = 0; d < head_dim; ++d) oh[d] += scores[i] * v[d];
    }
  }
}

}  // namespace ringmoe::kernels
