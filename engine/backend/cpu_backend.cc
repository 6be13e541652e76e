#include "engine/backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/host_weight.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::backend {
namespace {

// Keys per slice when one query's attention is split across threads: long
// enough that merging the slices costs little.
constexpr int64_t kMinPositionsPerSlice = 64;
// Consecutive query tokens of a sequence attended together in prefill
// (kernels::AttendQueryBlock): enough to read each key once for many
// queries, few enough that a prompt gives every thread several runs.
constexpr int64_t kQueryBlock = 16;

// out[j] = act(g[j * stride], u[j * stride]) for j < count (stride 2: the
// interleaved pairs of a fused gate_up).
void Activate(const float* g, const float* u, int64_t stride, int64_t count,
              const GatedActivation& act, float* out) {
  const bool clamped = act.kind == GatedActivation::Kind::kClampedSwiglu;
  for (int64_t j = 0; j < count; ++j) {
    float gj = g[j * stride], uj = u[j * stride];
    if (clamped) {
      gj = std::min(gj, act.limit);
      uj = std::clamp(uj, -act.limit, act.limit);
      out[j] = (uj + 1.f) * gj / (1.f + std::exp(-act.alpha * gj));
    } else {
      out[j] = gj / (1.f + std::exp(-gj)) * uj;
    }
  }
}

kernels::KvBlocks AsKernelBlocks(const KvBlocks& kv) {
  return {kv.k_blocks, kv.v_blocks, kv.block_size};
}

}  // namespace

absl::StatusOr<Weight> CpuBackend::Upload(const Weight& host) {
  if (host.memory != MemorySpace::kHost) {
    return absl::InvalidArgumentError(
        "the CPU backend reads weights in host memory only");
  }
  return host;
}

absl::StatusOr<Vector> CpuBackend::Upload(const Vector& host) {
  if (host.memory != MemorySpace::kHost) {
    return absl::InvalidArgumentError(
        "the CPU backend reads vectors in host memory only");
  }
  return host;
}

float* CpuBackend::Allocate(int64_t n) {
  return new float[static_cast<size_t>(std::max<int64_t>(n, 1))];
}

void CpuBackend::Free(float* data) { delete[] data; }

// An empty tensor's host side may be null (an empty vector's data()),
// which memcpy must not see even for no bytes.
void CpuBackend::CopyToHost(const Tensor& src, float* dst) {
  if (src.size() == 0) return;
  std::memcpy(dst, src.data, src.size() * sizeof(float));
}

void CpuBackend::CopyFromHost(const float* src, const Tensor& dst) {
  if (dst.size() == 0) return;
  std::memcpy(dst.data, src, dst.size() * sizeof(float));
}

void CpuBackend::CountProduct(const Weight& w, const kernels::MatMulJob& job) {
  if (work_ == nullptr) return;
  const int64_t bytes = StoredBytes(w);
  work_->weight_bytes += bytes;
  work_->weight_bytes_by_kernel[kernels::KernelPathName(
      kernels::ProductPath(job))] += bytes;
  work_->flops += 2.0 * job.n * w.rows * w.cols;
}

void CpuBackend::MatMul(absl::Span<const Product> products) {
  std::vector<kernels::MatMulJob> jobs;
  jobs.reserve(products.size());
  for (const Product& p : products) {
    jobs.push_back({p.x.data, p.x.rows, AsMatrix(*p.w), p.y.data, precision_,
                    p.batch_rows});
    CountProduct(*p.w, jobs.back());
  }
  kernels::MatMulBatch(jobs, pool_);
}

void CpuBackend::RunMlps(absl::Span<const MlpTask> tasks) {
  if (tasks.empty()) return;
  // The gate and up products of every MLP in one parallel loop, then the
  // down products in another: each weight is read once for all its rows,
  // and the threads split the work of all MLPs at once. Per task, `gate`
  // holds the gate product and then the down projection's input; `up` the
  // up product, or the fused gate_up product.
  std::vector<std::vector<float>> gate(tasks.size()), up(tasks.size());
  std::vector<Product> products;
  products.reserve(2 * tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    const MlpTask& t = tasks[i];
    const MlpWeights& w = *t.weights;
    const int64_t n = t.x.rows, inter = w.intermediate();
    gate[i].resize(n * inter);
    if (w.fused()) {
      up[i].resize(n * 2 * inter);
      products.push_back(
          {t.x, &w.gate_up, {up[i].data(), n, 2 * inter}, t.batch_rows});
      continue;
    }
    up[i].resize(n * inter);
    products.push_back(
        {t.x, &w.gate, {gate[i].data(), n, inter}, t.batch_rows});
    products.push_back({t.x, &w.up, {up[i].data(), n, inter}, t.batch_rows});
  }
  MatMul(products);
  products.clear();
  for (size_t i = 0; i < tasks.size(); ++i) {
    const MlpTask& t = tasks[i];
    const MlpWeights& w = *t.weights;
    const int64_t n = t.x.rows, inter = w.intermediate();
    if (w.fused()) {
      if (!w.gate_up_bias.empty()) {
        AddBias({up[i].data(), n, 2 * inter}, w.gate_up_bias);
      }
      Activate(up[i].data(), up[i].data() + 1, 2, n * inter, w.activation,
               gate[i].data());
    } else if (w.activation.kind == GatedActivation::Kind::kSilu) {
      kernels::SiluMul(gate[i].data(), up[i].data(), gate[i].size(),
                       gate[i].data());
    } else {
      Activate(gate[i].data(), up[i].data(), 1, n * inter, w.activation,
               gate[i].data());
    }
    products.push_back(
        {{gate[i].data(), n, inter}, &w.down, t.out, t.batch_rows});
  }
  MatMul(products);
  for (const MlpTask& t : tasks) {
    if (!t.weights->down_bias.empty()) AddBias(t.out, t.weights->down_bias);
  }
}

void CpuBackend::Embed(const Weight& table, absl::Span<const int32_t> tokens,
                       const Tensor& out) {
  const kernels::Matrix m = AsMatrix(table);
  for (size_t i = 0; i < tokens.size(); ++i) {
    kernels::ReadRow(m, tokens[i], out.row(i));
  }
  if (work_ != nullptr) {
    work_->weight_bytes +=
        static_cast<int64_t>(tokens.size()) *
        kernels::RowBytes(table.type, table.cols, table.group_size);
  }
}

void CpuBackend::RmsNorm(const Tensor& x, const Vector& weight, float eps,
                         const Tensor& y) {
  kernels::RmsNorm(x.data, weight.data, x.rows, x.cols, eps, y.data);
}

void CpuBackend::AddBias(const Tensor& y, const Vector& bias) {
  kernels::AddBias(y.data, y.rows, y.cols, bias.data);
}

void CpuBackend::Add(const Tensor& y, const Tensor& x) {
  const int64_t size = y.size();
  for (int64_t i = 0; i < size; ++i) y.data[i] += x.data[i];
}

void CpuBackend::Clamp(const Tensor& y, float limit) {
  const int64_t size = y.size();
  for (int64_t i = 0; i < size; ++i) {
    y.data[i] = std::clamp(y.data[i], -limit, limit);
  }
}

void CpuBackend::SetZero(const Tensor& y) {
  std::fill(y.data, y.data + y.size(), 0.f);
}

void CpuBackend::ApplyRotary(absl::Span<const RotaryTarget> targets,
                             const Tensor& cos, const Tensor& sin) {
  for (const auto& [x, slots] : targets) ApplyRotary(x, slots, cos, sin);
}

void CpuBackend::ApplyRotary(const Tensor& x, const RotarySlots& slots,
                             const Tensor& cos, const Tensor& sin) {
  for (int64_t i = 0; i < x.rows; ++i) {
    float* first = x.row(i) + slots.offset;
    if (slots.interleaved) {
      kernels::ApplyRotaryInterleaved(first, slots.count, slots.stride,
                                      slots.dim, cos.row(i), sin.row(i));
    } else if (slots.stride == slots.dim) {
      kernels::ApplyRotaryHalf(first, slots.count, slots.dim, cos.row(i),
                               sin.row(i));
    } else {
      for (int64_t h = 0; h < slots.count; ++h) {
        kernels::ApplyRotaryHalf(first + h * slots.stride, 1, slots.dim,
                                 cos.row(i), sin.row(i));
      }
    }
  }
}

void CpuBackend::WriteRows(absl::Span<const RowWrite> writes) {
  for (const auto& [src, dst] : writes) {
    for (size_t i = 0; i < dst.size(); ++i) {
      std::copy_n(src.row(i), src.cols, dst[i]);
    }
  }
}

void CpuBackend::GatherRows(const Tensor& x, absl::Span<const int32_t> rows,
                            const Tensor& out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(x.row(rows[i]), x.cols, out.row(i));
  }
}

void CpuBackend::GreedyTokens(const Tensor& logits, const Tensor& tokens) {
  for (int64_t r = 0; r < logits.rows; ++r) {
    const int32_t token = kernels::GreedyToken(logits.row(r), logits.cols);
    std::memcpy(tokens.data + r, &token, sizeof(token));
  }
}

void CpuBackend::AddScaledRows(const Tensor& src,
                               absl::Span<const int32_t> rows,
                               absl::Span<const float> scales,
                               const Tensor& y) {
  for (size_t i = 0; i < rows.size(); ++i) {
    float* dst = y.row(rows[i]);
    const float* s = src.row(i);
    for (int64_t d = 0; d < y.cols; ++d) dst[d] += scales[i] * s[d];
  }
}

void CpuBackend::AddSigmoidGated(const Tensor& src, const Tensor& x,
                                 const Vector& gate, const Tensor& y) {
  for (int64_t t = 0; t < y.rows; ++t) {
    const float* xt = x.row(t);
    float logit = 0.f;
    for (int64_t d = 0; d < x.cols; ++d) logit += xt[d] * gate.data[d];
    const float g = 1.f / (1.f + std::exp(-logit));
    float* yt = y.row(t);
    const float* st = src.row(t);
    for (int64_t d = 0; d < y.cols; ++d) yt[d] += g * st[d];
  }
}

void CpuBackend::Attend(const AttentionJob& job) {
  const int64_t n = job.q.rows;
  const int64_t heads = job.heads, head_dim = job.head_dim;
  const int64_t qw = heads * head_dim;
  const absl::Span<const int32_t> seq_of = job.sequence_of;
  const absl::Span<const int64_t> position_of = job.position_of;
  // With at least as many tokens as threads (prefill, batched decode), work
  // items are runs of up to kQueryBlock consecutive tokens of one sequence,
  // attended together so that each key is read once per run. With fewer
  // (decode), a token's positions are split across threads and the slices
  // merged by their log-sum-exps. Sinks join the softmax denominator: runs
  // apply them in the kernel, sliced tokens after the merge, so with sinks
  // even an unsplit token keeps its log-sum-exp (a slice of one).
  const int threads = pool_ == nullptr ? 1 : pool_->num_threads();
  const bool sinks = !job.sinks.empty();
  const bool runs = std::max(n, job.batch_rows) >= threads;
  struct Item {
    // Tokens [token, token + count) over positions [first, end) (a run:
    // part < 0 and first, end unused) or a slice of one token's positions.
    int64_t token, count, first, end, part;
  };
  std::vector<Item> items;
  std::vector<int64_t> first_item(n + 1);
  int64_t parts = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t end = position_of[i] + 1;
    const int64_t first =
        job.window > 0 ? std::max<int64_t>(0, end - job.window) : 0;
    if (work_ != nullptr) work_->flops += 4.0 * qw * (end - first);
    first_item[i] = static_cast<int64_t>(items.size());
    if (runs) {
      Item* run = items.empty() ? nullptr : &items.back();
      if (run != nullptr && run->count < kQueryBlock &&
          seq_of[run->token] == seq_of[i] &&
          position_of[run->token] + run->count == position_of[i]) {
        ++run->count;
      } else {
        items.push_back({i, 1, 0, 0, -1});
      }
      continue;
    }
    const int64_t slices =
        n >= threads ? 1
                     : std::clamp<int64_t>(
                           (end - first) / kMinPositionsPerSlice, 1, threads);
    for (int64_t s = 0; s < slices; ++s) {
      items.push_back({i, 1, first + (end - first) * s / slices,
                       first + (end - first) * (s + 1) / slices,
                       slices == 1 && !sinks ? -1 : parts++});
    }
  }
  first_item[n] = static_cast<int64_t>(items.size());
  std::vector<float> part_out(parts * qw), part_lse(parts * heads);
  const int64_t num_items = static_cast<int64_t>(items.size());
  // Later runs of a sequence attend to more positions: claimed first, they
  // leave the cheap ones to even out the end of the loop.
  ParallelFor(pool_, num_items, [&](int64_t t) {
    const Item& it = items[num_items - 1 - t];
    const float* qi = job.q.row(it.token);
    const kernels::KvBlocks blocks =
        AsKernelBlocks(job.sequences[seq_of[it.token]]);
    if (runs) {
      kernels::AttendQueryBlock(qi, it.count, heads, job.kv_heads, head_dim,
                                blocks, position_of[it.token], job.window,
                                job.scale, sinks ? job.sinks.data : nullptr,
                                job.out.row(it.token));
    } else if (it.part < 0) {
      kernels::AttendOneQuery(qi, heads, job.kv_heads, head_dim, blocks,
                              it.first, it.end, job.scale,
                              job.out.row(it.token));
    } else {
      kernels::AttendOneQueryPartial(qi, heads, job.kv_heads, head_dim, blocks,
                                     it.first, it.end, job.scale,
                                     part_out.data() + it.part * qw,
                                     part_lse.data() + it.part * heads);
    }
  });
  // Merges the slices of split tokens, and with sinks scales each head by
  // its share of the denominator that includes the sink.
  for (int64_t i = 0; i < n && !runs; ++i) {
    const Item& it = items[first_item[i]];
    if (it.part < 0) continue;
    const int64_t count = first_item[i + 1] - first_item[i];
    const float* lse = part_lse.data() + it.part * heads;
    float* out = job.out.row(i);
    kernels::MergeAttention(count, heads, head_dim,
                            part_out.data() + it.part * qw, lse, out);
    if (!sinks) continue;
    for (int64_t h = 0; h < heads; ++h) {
      // log Z over the slices, then Z / (Z + e^sink) = 1 / (1 + e^(sink -
      // log Z)).
      float top = -INFINITY;
      for (int64_t p = 0; p < count; ++p)
        top = std::max(top, lse[p * heads + h]);
      float sum = 0.f;
      for (int64_t p = 0; p < count; ++p) {
        sum += std::exp(lse[p * heads + h] - top);
      }
      const float share =
          1.f / (1.f + std::exp(job.sinks.data[h] - (top + std::log(sum))));
      for (int64_t d = 0; d < head_dim; ++d) out[h * head_dim + d] *= share;
    }
  }
}

void CpuBackend::AbsorbMlaQueries(const Tensor& q, const Weight& kv_b,
                                  const model::MlaSpec& mla, int64_t heads,
                                  const Tensor& absorbed) {
  const int64_t n = q.rows, qk = mla.qk_head_dim();
  const int64_t nope = mla.qk_nope_head_dim, rope = mla.qk_rope_head_dim;
  const int64_t v_dim = mla.v_head_dim, row = mla.cache_width();
  const int64_t lora = mla.kv_lora_rank;
  const kernels::Matrix w = AsMatrix(kv_b);
  SetZero(absorbed);
  ParallelFor(pool_, heads, [&](int64_t h) {
    const int64_t first_row = h * (nope + v_dim);
    kernels::AccumulateRowProducts(q.data + h * qk, heads * qk, n, w, first_row,
                                   first_row + nope, absorbed.data + h * row,
                                   heads * row);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(q.row(i) + h * qk + nope, rope,
                  absorbed.row(i) + h * row + lora);
    }
  });
  if (work_ != nullptr) {
    work_->weight_bytes += StoredBytes(kv_b) * nope / (nope + v_dim);
    work_->flops += 2.0 * n * heads * nope * lora;
  }
}

void CpuBackend::ExpandMlaValues(const Tensor& attended, const Weight& kv_b,
                                 const model::MlaSpec& mla, int64_t heads,
                                 const Tensor& values, int64_t batch_rows) {
  const int64_t n = attended.rows, nope = mla.qk_nope_head_dim;
  const int64_t v_dim = mla.v_head_dim, row = mla.cache_width();
  const int64_t lora = mla.kv_lora_rank;
  const kernels::Matrix w = AsMatrix(kv_b);
  std::vector<float> up(n * w.rows);
  ParallelFor(pool_, heads, [&](int64_t h) {
    std::vector<float> latent(n * lora);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(attended.row(i) + h * row, lora, latent.data() + i * lora);
    }
    const int64_t first_row = h * (nope + v_dim) + nope;
    kernels::MatMulTransposedRows(latent.data(), n, w, first_row,
                                  first_row + v_dim, up.data(), batch_rows);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(up.data() + i * w.rows + first_row, v_dim,
                  values.row(i) + h * v_dim);
    }
  });
  if (work_ != nullptr) {
    work_->weight_bytes +=
        StoredBytes(kv_b) - StoredBytes(kv_b) * nope / (nope + v_dim);
    work_->flops += 2.0 * n * heads * v_dim * lora;
  }
}

}  // namespace ringmoe::backend
