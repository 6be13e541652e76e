// CpuBackend's operations against double-precision references on random
// ragged shapes, threaded and not, on whichever kernel path this CPU takes
// (//tests/isa runs the engine's tests on the others).
#include "engine/backend/cpu_backend.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::backend {
namespace {

std::vector<float> Random(int64_t n, std::mt19937* rng, float sd = 1.f) {
  std::normal_distribution<float> normal(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(*rng);
  return v;
}

Weight F32Weight(const std::vector<float>& data, int64_t rows, int64_t cols) {
  Weight w;
  w.data = data.data();
  w.rows = rows;
  w.cols = cols;
  return w;
}

Tensor Of(std::vector<float>& v, int64_t rows, int64_t cols) {
  return {v.data(), rows, cols};
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::abs(want[i])))
        << what << " at " << i;
  }
}

TEST(CpuBackendTest, RunMlpsMatchesADoubleReferenceOnRaggedShapes) {
  std::mt19937 rng(7);
  ThreadPool pool(3);
  CpuBackend backend(&pool);
  for (int64_t hidden : {8, 40, 67}) {
    const int64_t inter = hidden + 13;
    struct Mlp {
      std::vector<float> gate, up, down;
      MlpWeights weights;
    };
    std::vector<Mlp> mlps(3);
    for (Mlp& m : mlps) {
      m.gate = Random(inter * hidden, &rng, 0.2f);
      m.up = Random(inter * hidden, &rng, 0.2f);
      m.down = Random(hidden * inter, &rng, 0.2f);
      m.weights = {F32Weight(m.gate, inter, hidden),
                   F32Weight(m.up, inter, hidden),
                   F32Weight(m.down, hidden, inter)};
    }
    const int64_t rows[] = {1, 5, 17};
    std::vector<std::vector<float>> x(3), out(3);
    std::vector<MlpTask> tasks;
    for (int i = 0; i < 3; ++i) {
      x[i] = Random(rows[i] * hidden, &rng);
      out[i].resize(rows[i] * hidden);
      tasks.push_back({&mlps[i].weights, Of(x[i], rows[i], hidden),
                       Of(out[i], rows[i], hidden)});
    }
    Work work;
    backend.set_work(&work);
    backend.RunMlps(tasks);
    backend.set_work(nullptr);
    int64_t bytes = 0;
    for (int i = 0; i < 3; ++i) bytes += 3 * inter * hidden * 4;
    EXPECT_EQ(work.weight_bytes, bytes);
    EXPECT_EQ(work.flops, 2.0 * 3 * inter * hidden * (1 + 5 + 17));
    for (int i = 0; i < 3; ++i) {
      const Mlp& m = mlps[i];
      std::vector<double> want(rows[i] * hidden, 0.0);
      for (int64_t t = 0; t < rows[i]; ++t) {
        std::vector<double> act(inter);
        for (int64_t j = 0; j < inter; ++j) {
          double g = 0, u = 0;
          for (int64_t d = 0; d < hidden; ++d) {
            g += double{m.gate[j * hidden + d]} * x[i][t * hidden + d];
            u += double{m.up[j * hidden + d]} * x[i][t * hidden + d];
          }
          act[j] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t d = 0; d < hidden; ++d) {
          for (int64_t j = 0; j < inter; ++j) {
            want[t * hidden + d] += double{m.down[d * inter + j]} * act[j];
          }
        }
      }
      ExpectNear(out[i], want, 1e-4, "mlp " + std::to_string(i));
    }
  }
}

// gpt-oss's experts: one fused matrix with gate and up rows interleaved,
// its interleaved bias, the clamped SwiGLU and a down bias.
TEST(CpuBackendTest, FusedClampedSwigluMlpMatchesADoubleReference) {
  std::mt19937 rng(23);
  ThreadPool pool(2);
  CpuBackend backend(&pool);
  const int64_t hidden = 40, inter = 24, n = 6;
  // Large enough weights that the clamps at ±limit take effect.
  std::vector<float> gate_up = Random(2 * inter * hidden, &rng, 0.8f);
  std::vector<float> down = Random(hidden * inter, &rng, 0.2f);
  std::vector<float> gate_up_bias = Random(2 * inter, &rng, 1.f);
  std::vector<float> down_bias = Random(hidden, &rng, 1.f);
  MlpWeights w;
  w.gate_up = F32Weight(gate_up, 2 * inter, hidden);
  w.gate_up_bias = {gate_up_bias.data(), 2 * inter};
  w.down = F32Weight(down, hidden, inter);
  w.down_bias = {down_bias.data(), hidden};
  w.activation.kind = GatedActivation::Kind::kClampedSwiglu;
  w.activation.alpha = 1.702f;
  w.activation.limit = 7.f;
  std::vector<float> x = Random(n * hidden, &rng, 1.f), out(n * hidden);
  const MlpTask task{&w, Of(x, n, hidden), Of(out, n, hidden)};
  backend.RunMlps({&task, 1});
  std::vector<double> want(n * hidden);
  int clamped = 0;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> act(inter);
    for (int64_t j = 0; j < inter; ++j) {
      double g = gate_up_bias[2 * j], u = gate_up_bias[2 * j + 1];
      for (int64_t d = 0; d < hidden; ++d) {
        g += double{gate_up[(2 * j) * hidden + d]} * x[t * hidden + d];
        u += double{gate_up[(2 * j + 1) * hidden + d]} * x[t * hidden + d];
      }
      clamped += g > 7 || std::abs(u) > 7;
      g = std::min(g, 7.0);
      u = std::clamp(u, -7.0, 7.0);
      act[j] = (u + 1) * g / (1 + std::exp(-1.702 * g));
    }
    for (int64_t d = 0; d < hidden; ++d) {
      double acc = down_bias[d];
      for (int64_t j = 0; j < inter; ++j)
        acc += double{down[d * inter + j]} * act[j];
      want[t * hidden + d] = acc;
    }
  }
  EXPECT_GT(clamped, 0);
  ExpectNear(out, want, 1e-4, "fused clamped swiglu");
}

// A step of several sequences in a paged cache: one gets a chunk of new
// tokens, the others one token each.
struct AttentionCase {
  int64_t heads, kv_heads, head_dim, block_size, window;
  std::vector<int64_t> lengths;  // per sequence, after the step
  std::vector<int64_t> new_tokens;
  bool sinks = false;
};

void CheckAttention(const AttentionCase& c, ThreadPool* pool,
                    std::mt19937* rng) {
  CpuBackend backend(pool);
  const int64_t kvw = c.kv_heads * c.head_dim, qw = c.heads * c.head_dim;
  std::vector<std::vector<float>> keys, values;
  std::vector<std::vector<const float*>> k_blocks, v_blocks;
  std::vector<KvBlocks> sequences;
  std::vector<int32_t> sequence_of;
  std::vector<int64_t> position_of;
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    const int64_t blocks = (c.lengths[s] + c.block_size - 1) / c.block_size;
    keys.push_back(Random(blocks * c.block_size * kvw, rng));
    values.push_back(Random(blocks * c.block_size * kvw, rng));
  }
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    const int64_t blocks = (c.lengths[s] + c.block_size - 1) / c.block_size;
    k_blocks.emplace_back();
    v_blocks.emplace_back();
    for (int64_t b = 0; b < blocks; ++b) {
      k_blocks[s].push_back(keys[s].data() + b * c.block_size * kvw);
      v_blocks[s].push_back(values[s].data() + b * c.block_size * kvw);
    }
    for (int64_t p = c.lengths[s] - c.new_tokens[s]; p < c.lengths[s]; ++p) {
      sequence_of.push_back(static_cast<int32_t>(s));
      position_of.push_back(p);
    }
  }
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    sequences.push_back({k_blocks[s].data(), v_blocks[s].data(), c.block_size});
  }
  const int64_t n = static_cast<int64_t>(position_of.size());
  std::vector<float> q = Random(n * qw, rng), out(n * qw);
  const std::vector<float> sinks = Random(c.heads, rng, 2.f);
  AttentionJob job;
  job.q = Of(q, n, qw);
  job.heads = c.heads;
  job.kv_heads = c.kv_heads;
  job.head_dim = c.head_dim;
  job.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  job.window = c.window;
  job.sequences = sequences;
  job.sequence_of = sequence_of;
  job.position_of = position_of;
  if (c.sinks) job.sinks = {sinks.data(), c.heads};
  job.out = Of(out, n, qw);
  backend.Attend(job);

  std::vector<double> want(n * qw, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t s = sequence_of[t];
    const int64_t end = position_of[t] + 1;
    const int64_t first =
        c.window > 0 ? std::max<int64_t>(0, end - c.window) : 0;
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t kvh = h / (c.heads / c.kv_heads);
      std::vector<double> score;
      double best = -INFINITY;
      for (int64_t p = first; p < end; ++p) {
        double dot = 0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += double{q[t * qw + h * c.head_dim + d]} *
                 keys[s][p * kvw + kvh * c.head_dim + d];
        }
        score.push_back(dot / std::sqrt(double(c.head_dim)));
        best = std::max(best, score.back());
      }
      double sum = c.sinks ? std::exp(sinks[h] - best) : 0.0;
      for (double& e : score) sum += (e = std::exp(e - best));
      for (int64_t p = first; p < end; ++p) {
        for (int64_t d = 0; d < c.head_dim; ++d) {
          want[t * qw + h * c.head_dim + d] +=
              score[p - first] / sum *
              values[s][p * kvw + kvh * c.head_dim + d];
        }
      }
    }
  }
  ExpectNear(out, want, 2e-5,
             "heads " + std::to_string(c.heads) + " window " +
                 std::to_string(c.window) + " tokens " + std::to_string(n) +
                 (c.sinks ? " sinks" : ""));
}

TEST(CpuBackendTest, AttendMatchesADoubleReference) {
  std::mt19937 rng(3);
  ThreadPool pool(3);
  const AttentionCase cases[] = {
      // Prefill chunk beside decode tokens: runs of query blocks.
      {4, 2, 12, 4, 0, {37, 5, 90}, {20, 1, 1}},
      {4, 2, 12, 4, 7, {37, 5, 90}, {20, 1, 1}},
      {6, 6, 9, 8, 16, {50}, {50}},
      // Fewer tokens than threads: long positions split and merged.
      {4, 1, 16, 16, 0, {300}, {1}},
      {4, 1, 16, 16, 150, {300, 200}, {1, 1}},
      {2, 2, 5, 3, 0, {1}, {1}},
  };
  for (AttentionCase c : cases) {
    for (bool sinks : {false, true}) {
      c.sinks = sinks;
      CheckAttention(c, &pool, &rng);
      CheckAttention(c, nullptr, &rng);
    }
  }
}

TEST(CpuBackendTest, ApplyRotaryRotatesEverySlotLayout) {
  std::mt19937 rng(5);
  CpuBackend backend(nullptr);
  const int64_t rows = 3, dim = 8, half = dim / 2;
  std::vector<float> angles = Random(rows * half, &rng);
  std::vector<float> cos(rows * half), sin(rows * half);
  for (size_t i = 0; i < angles.size(); ++i) {
    cos[i] = std::cos(angles[i]);
    sin[i] = std::sin(angles[i]);
  }
  const RotarySlots layouts[] = {
      {2, dim, 0, dim, false},  // whole heads, rotate-half
      {3, 11, 2, dim, false},   // partial heads at an offset
      {3, 11, 3, dim, true},    // interleaved (MLA)
  };
  for (const RotarySlots& slots : layouts) {
    const int64_t cols = slots.offset + slots.count * slots.stride;
    std::vector<float> x = Random(rows * cols, &rng);
    std::vector<double> want(x.begin(), x.end());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < slots.count; ++h) {
        const int64_t base = r * cols + slots.offset + h * slots.stride;
        for (int64_t j = 0; j < half; ++j) {
          const int64_t a = slots.interleaved ? base + 2 * j : base + j;
          const int64_t b = slots.interleaved ? a + 1 : base + j + half;
          const double c = cos[r * half + j], s = sin[r * half + j];
          want[a] = double{x[a]} * c - double{x[b]} * s;
          want[b] = double{x[b]} * c + double{x[a]} * s;
        }
      }
    }
    backend.ApplyRotary(Of(x, rows, cols), slots, Of(cos, rows, half),
                        Of(sin, rows, half));
    ExpectNear(x, want, 1e-6, "rotary offset " + std::to_string(slots.offset));
  }
}

TEST(CpuBackendTest, RowOperations) {
  std::mt19937 rng(9);
  CpuBackend backend(nullptr);
  const int64_t n = 5, dim = 7;
  std::vector<float> x = Random(n * dim, &rng);
  const std::vector<int32_t> rows = {4, 0, 4, 2};
  std::vector<float> gathered(rows.size() * dim);
  backend.GatherRows(Of(x, n, dim), rows, Of(gathered, rows.size(), dim));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_EQ(gathered[i * dim + d], x[rows[i] * dim + d]);
    }
  }
  const std::vector<float> scales = {0.5f, -2.f, 0.25f, 3.f};
  std::vector<float> y = Random(n * dim, &rng);
  std::vector<double> want(y.begin(), y.end());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t d = 0; d < dim; ++d) {
      want[rows[i] * dim + d] += double{scales[i]} * gathered[i * dim + d];
    }
  }
  backend.AddScaledRows(Of(gathered, rows.size(), dim), rows, scales,
                        Of(y, n, dim));
  ExpectNear(y, want, 1e-6, "add scaled rows");

  std::vector<float> gate = Random(dim, &rng), src = Random(n * dim, &rng);
  for (int64_t t = 0; t < n; ++t) {
    double logit = 0;
    for (int64_t d = 0; d < dim; ++d) logit += double{x[t * dim + d]} * gate[d];
    for (int64_t d = 0; d < dim; ++d) {
      want[t * dim + d] =
          y[t * dim + d] + src[t * dim + d] / (1 + std::exp(-logit));
    }
  }
  backend.AddSigmoidGated(Of(src, n, dim), Of(x, n, dim), {gate.data(), dim},
                          Of(y, n, dim));
  ExpectNear(y, want, 1e-6, "sigmoid gated");
}

TEST(CpuBackendTest, MlaAbsorbAndExpandMatchADoubleReference) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  CpuBackend backend(&pool);
  model::MlaSpec mla;
  mla.kv_lora_rank = 24;
  mla.qk_nope_head_dim = 10;
  mla.qk_rope_head_dim = 6;
  mla.v_head_dim = 9;
  const int64_t heads = 3, n = 4, qk = mla.qk_head_dim();
  const int64_t lora = mla.kv_lora_rank, row = mla.cache_width();
  const int64_t per_head = mla.qk_nope_head_dim + mla.v_head_dim;
  std::vector<float> kv_b_data = Random(heads * per_head * lora, &rng, 0.3f);
  const Weight kv_b = F32Weight(kv_b_data, heads * per_head, lora);
  std::vector<float> q = Random(n * heads * qk, &rng);
  std::vector<float> absorbed(n * heads * row);
  backend.AbsorbMlaQueries(Of(q, n, heads * qk), kv_b, mla, heads,
                           Of(absorbed, n, heads * row));
  std::vector<double> want(n * heads * row, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q.data() + (t * heads + h) * qk;
      double* out = want.data() + (t * heads + h) * row;
      for (int64_t k = 0; k < lora; ++k) {
        for (int64_t r = 0; r < mla.qk_nope_head_dim; ++r) {
          out[k] += double{qh[r]} * kv_b_data[(h * per_head + r) * lora + k];
        }
      }
      for (int64_t r = 0; r < mla.qk_rope_head_dim; ++r) {
        out[lora + r] = qh[mla.qk_nope_head_dim + r];
      }
    }
  }
  ExpectNear(absorbed, want, 1e-5, "absorbed queries");

  std::vector<float> attended = Random(n * heads * row, &rng);
  std::vector<float> values(n * heads * mla.v_head_dim);
  backend.ExpandMlaValues(Of(attended, n, heads * row), kv_b, mla, heads,
                          Of(values, n, heads * mla.v_head_dim));
  std::vector<double> want_values(values.size(), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t v = 0; v < mla.v_head_dim; ++v) {
        double sum = 0;
        const int64_t r = h * per_head + mla.qk_nope_head_dim + v;
        for (int64_t k = 0; k < lora; ++k) {
          sum += double{attended[(t * heads + h) * row + k]} *
                 kv_b_data[r * lora + k];
        }
        want_values[(t * heads + h) * mla.v_head_dim + v] = sum;
      }
    }
  }
  ExpectNear(values, want_values, 1e-5, "expanded values");
}

TEST(CpuBackendTest, UploadKeepsHostWeightsAndRefusesDeviceOnes) {
  CpuBackend backend(nullptr);
  std::vector<float> data(6, 1.f);
  Weight w = F32Weight(data, 2, 3);
  absl::StatusOr<Weight> uploaded = backend.Upload(w);
  ASSERT_TRUE(uploaded.ok());
  EXPECT_EQ(uploaded->data, w.data);
  w.memory = MemorySpace::kDevice;
  EXPECT_FALSE(backend.Upload(w).ok());
  const Vector v{data.data(), 6, MemorySpace::kDevice};
  EXPECT_FALSE(backend.Upload(v).ok());
}

}  // namespace
}  // namespace ringmoe::backend
