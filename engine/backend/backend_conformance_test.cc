// Every Backend operation on every backend this build and machine offer
// ("cpu", the CPU-backed "standin" device, and "cuda:0" where a GPU is
// present in a CUDA build; skipped elsewhere), against double-precision
// references on ragged shapes. The tests go through the interface alone:
// tensors in the backend's memory (written and read through CopyFromHost and
// CopyToHost), weights and vectors uploaded, KV blocks pointing into a backend
// tensor, so the same test holds a device backend to what the CPU backend does.
// Outputs start as NaN, so an element an operation fails to write fails its
// comparison.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/thread_pool.h"
#include "engine/backend/backend.h"
#include "engine/backend/backend_factory.h"
#include "engine/backend/backend_test_util.h"
#include "engine/model/model_spec.h"
#include "engine/moe/routing.h"
#include "gtest/gtest.h"

namespace ringmoe::backend {
namespace {

// Relative to the double reference (tolerance · (1 + |want|)): float32
// arithmetic over sums of at most a few hundred terms.
constexpr double kTolerance = 1e-5;
// An MLP: two chained products with activations of several units between.
constexpr double kMlpTolerance = 1e-4;
// Softmax over hundreds of positions.
constexpr double kAttentionTolerance = 2e-5;
// Steps of more tokens route on the host (cuda::kMaxRoutedTokens).
constexpr int64_t kMaxRoutedTokens = 64;

// A step of several sequences in a paged cache.
struct AttentionCase {
  int64_t heads, kv_heads, head_dim, block_size;
  std::vector<int64_t> lengths;     // per sequence, after the step
  std::vector<int64_t> new_tokens;  // per sequence, the step's last ones
  int64_t window;                   // of the windowed runs
  bool shared_kv = false;           // values are the keys (MLA's latents)
};

class BackendConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cpu") pool_ = std::make_unique<ThreadPool>(3);
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateBackend(GetParam(), pool_.get());
    // No GPU here, or a build without CUDA.
    if (!backend.ok()) GTEST_SKIP() << backend.status();
    backend_ = *std::move(backend);
  }

  void TearDown() override {
    if (backend_ == nullptr) return;
    const absl::Status status = backend_->TakeError();
    EXPECT_TRUE(status.ok()) << status;
  }

  Backend& backend() { return *backend_; }

  // A [rows, cols] tensor holding `host`.
  Backend::Buffer Put(const std::vector<float>& host, int64_t rows,
                      int64_t cols) {
    EXPECT_EQ(static_cast<int64_t>(host.size()), rows * cols);
    Backend::Buffer buffer = backend_->NewTensor(rows, cols);
    backend_->CopyFromHost(host.data(), buffer);
    return buffer;
  }

  // A [rows, cols] tensor of NaNs, for an operation's output.
  Backend::Buffer Poisoned(int64_t rows, int64_t cols) {
    return Put(std::vector<float>(rows * cols, NAN), rows, cols);
  }

  // The tensor's values once every operation before has run; expects none
  // of them failed.
  std::vector<float> Get(const Tensor& t) {
    std::vector<float> host(t.size());
    backend_->CopyToHost(t, host.data());
    const absl::Status status = backend_->TakeError();
    EXPECT_TRUE(status.ok()) << status;
    return host;
  }

  // The weight or vector in the backend's memory. The CPU backend reads the
  // host memory itself, so `host` must outlive its uses.
  Weight Upload(const Weight& host) {
    absl::StatusOr<Weight> w = backend_->Upload(host);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *w : Weight{};
  }
  Vector Upload(const std::vector<float>& host) {
    absl::StatusOr<Vector> v = backend_->Upload(
        Vector{host.data(), static_cast<int64_t>(host.size())});
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : Vector{};
  }

  // Attends the case's step with `window` (with the heads' sinks or not)
  // and compares it with the reference.
  void CheckAttention(const AttentionCase& c, int64_t window, bool with_sinks,
                      std::mt19937* rng);

  // Declared first: the CPU backend runs on the pool until it is destroyed.
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Backend> backend_;
};

TEST_P(BackendConformanceTest, NamesItselfAndUploadsIntoItsWeightMemory) {
  EXPECT_EQ(backend().name(), GetParam());
  std::mt19937 rng(1);
  for (const WeightFormat& format : AllWeightFormats()) {
    const TestWeight host = MakeTestWeight(format, 5, 40, &rng);
    const Weight w = Upload(host.weight);
    EXPECT_EQ(w.memory, backend().weight_memory()) << FormatName(format);
    EXPECT_EQ(w.type, format.type);
    EXPECT_EQ(w.rows, 5);
    EXPECT_EQ(w.cols, 40);
    EXPECT_EQ(w.group_size, host.weight.group_size);
    EXPECT_EQ(w.block_rows, host.weight.block_rows);
    EXPECT_EQ(w.block_cols, host.weight.block_cols);
    EXPECT_EQ(StoredBytes(w), StoredBytes(host.weight));
  }
  const std::vector<float> host = Random(7, &rng);
  const Vector v = Upload(host);
  EXPECT_EQ(v.memory, backend().weight_memory());
  EXPECT_EQ(v.size, 7);
  backend().Synchronize();
}

// Products in every storage format, several in one call over row slices of
// shared tensors (as the MoE block hands them): 1 to 8 rows (the CUDA
// backend's fused pass over the stored bytes), 9 to 64 (the same pass on
// the tensor cores, 33 in two passes, where decoding is vectorised) and
// more (dequantised tiles through cuBLAS); columns that are multiples of 8
// (vectorised decoding) and not; weight rows that are not multiples of 8
// (nor of the tensor-core blocks' 16).
TEST_P(BackendConformanceTest, MatMulMatchesADoubleReferenceForEveryFormat) {
  std::mt19937 rng(11);
  const int64_t row_counts[] = {1, 3, 8, 9, 33, 65};
  const int64_t total_rows = 1 + 3 + 8 + 9 + 33 + 65;
  const int64_t shapes[][2] = {{13, 40}, {37, 67}, {48, 96}, {21, 256}};
  const int num_shapes = 4;
  for (const WeightFormat& format : AllWeightFormats()) {
    const std::string name = FormatName(format);
    std::vector<TestWeight> host;
    std::vector<Weight> weights;
    std::vector<std::vector<float>> x_host;
    std::vector<Backend::Buffer> x, y;
    for (const auto& [rows, cols] : shapes) {
      host.push_back(MakeTestWeight(format, rows, cols, &rng));
      weights.push_back(Upload(host.back().weight));
      x_host.push_back(GridActivations(total_rows, cols,
                                       ActivationLevels(format.type), &rng));
      x.push_back(Put(x_host.back(), total_rows, cols));
      y.push_back(Poisoned(total_rows, rows));
    }
    std::vector<Product> products;
    int64_t weight_bytes = 0;
    double flops = 0;
    for (int s = 0; s < num_shapes; ++s) {
      int64_t first = 0;
      for (int64_t n : row_counts) {
        products.push_back({x[s].tensor().Rows(first, n), &weights[s],
                            y[s].tensor().Rows(first, n)});
        first += n;
        weight_bytes += StoredBytes(host[s].weight);
        flops += 2.0 * n * shapes[s][0] * shapes[s][1];
      }
    }
    Work work;
    backend().set_work(&work);
    backend().MatMul(products);
    backend().set_work(nullptr);
    EXPECT_EQ(work.weight_bytes, weight_bytes) << name;
    EXPECT_EQ(work.flops, flops) << name;
    int64_t by_kernel = 0;
    for (const auto& [kernel, bytes] : work.weight_bytes_by_kernel) {
      by_kernel += bytes;
    }
    EXPECT_EQ(by_kernel, weight_bytes) << name;
    for (int s = 0; s < num_shapes; ++s) {
      const auto [rows, cols] = shapes[s];
      ExpectNear(
          Get(y[s]),
          ReferenceProduct(x_host[s], total_rows, host[s].values, rows, cols),
          kTolerance, absl::StrCat(name, " ", rows, "x", cols));
    }
  }
}

// Independent products in one call, as attention's q, k and v come: the CUDA
// backend launches decode-sized ones of one format and width together (at
// most four a launch, so the five of one input make two launches, one of
// them with a product of eight rows, a whole block); a product of another
// width and one of another format in the same call launch apart, and more
// than eight rows launch one by one (on the tensor cores). Every output starts
// as NaN and is checked, so a block that reads another product's operands or
// writes outside its own rows fails.
TEST_P(BackendConformanceTest, MatMulOfSeveralProductsOfOneInput) {
  std::mt19937 rng(13);
  const int64_t cols = 96;
  for (const WeightFormat& format : AllWeightFormats()) {
    const WeightFormat other{format.type == WeightType::kBF16
                                 ? WeightType::kF32
                                 : WeightType::kBF16};
    struct Case {
      WeightFormat format;
      int64_t rows;
      int64_t cols;
    };
    const Case cases[] = {{format, 29, cols}, {format, 8, cols},
                          {format, 1, cols},  {format, 3, cols},
                          {format, 41, cols}, {format, 11, cols - 8},
                          {other, 6, cols},   {format, 5, cols}};
    for (int64_t n : {1, 5, 8, 9}) {
      const std::string name = absl::StrCat(FormatName(format), " n=", n);
      std::vector<TestWeight> host;
      std::vector<Weight> weights;
      for (const Case& c : cases) {
        host.push_back(MakeTestWeight(c.format, c.rows, c.cols, &rng));
        weights.push_back(Upload(host.back().weight));
      }
      const int levels =
          std::max(ActivationLevels(format.type), ActivationLevels(other.type));
      const std::vector<float> x_host = GridActivations(n, cols, levels, &rng);
      const std::vector<float> narrow_host =
          GridActivations(n, cols - 8, levels, &rng);
      const Backend::Buffer x = Put(x_host, n, cols);
      const Backend::Buffer narrow = Put(narrow_host, n, cols - 8);
      std::vector<Backend::Buffer> y;
      std::vector<Product> products;
      for (size_t i = 0; i < host.size(); ++i) {
        y.push_back(Poisoned(n, cases[i].rows));
        products.push_back(
            {cases[i].cols == cols ? x.tensor() : narrow.tensor(), &weights[i],
             y.back()});
      }
      backend().MatMul(products);
      for (size_t i = 0; i < host.size(); ++i) {
        ExpectNear(
            Get(y[i]),
            ReferenceProduct(cases[i].cols == cols ? x_host : narrow_host, n,
                             host[i].values, cases[i].rows, cases[i].cols),
            kTolerance, absl::StrCat(name, " product ", i));
      }
    }
  }
}

// A weight larger than one of the CUDA backend's dequantised tiles (2^24
// floats), so that a product of more than 64 rows runs tile by tile into
// column ranges of its output through cuBLAS; 9 rows against it run on the
// tensor cores over many blocks, one row as one pass. The weight repeats
// a table of 1021 random bf16 values, so that its reference needs no
// decoded copy of the whole.
TEST_P(BackendConformanceTest, MatMulOverSeveralDequantisedTiles) {
  std::mt19937 rng(12);
  const int64_t rows = 2100, cols = 8192, period = 1021;
  const TestWeight table = MakeTestWeight({WeightType::kBF16}, 1, period, &rng);
  const auto index = [&](int64_t r, int64_t c) {
    return (r * 131 + c) % period;
  };
  std::vector<uint16_t> data(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      data[r * cols + c] =
          static_cast<uint16_t>(table.bytes[2 * index(r, c)] |
                                (table.bytes[2 * index(r, c) + 1] << 8));
    }
  }
  Weight host;
  host.data = data.data();
  host.type = WeightType::kBF16;
  host.rows = rows;
  host.cols = cols;
  const Weight w = Upload(host);
  for (int64_t n : {65, 9, 1}) {
    // Outputs of order one, where float32 sums of 8192 terms still meet
    // kTolerance · (1 + |want|).
    const std::vector<float> x_host = Random(n * cols, &rng, 0.02f);
    const Backend::Buffer x = Put(x_host, n, cols);
    const Backend::Buffer y = Poisoned(n, rows);
    backend().MatMul({{x, &w, y}});
    std::vector<double> want(n * rows);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < cols; ++c) {
          acc += double{x_host[i * cols + c]} * table.values[index(r, c)];
        }
        want[i * rows + r] = acc;
      }
    }
    ExpectNear(Get(y), want, kTolerance, absl::StrCat(n, " rows"));
  }
}

// One MLP of RunMlps: its weights on the host (for the reference) and in
// the backend, its rows and their output.
struct Mlp {
  TestWeight gate, up, gate_up, down;
  std::vector<float> gate_up_bias, down_bias;
  MlpWeights weights;  // in the backend's memory
  int64_t hidden = 0, intermediate = 0, n = 0;
  std::vector<float> x;
  Backend::Buffer x_tensor, out;
};

// down(act(gate(x), up(x))) (+ biases) in double; counts the gate and up
// values the clamped SwiGLU clamps into `clamped`.
std::vector<double> ReferenceMlp(const Mlp& m, int* clamped) {
  const int64_t hidden = m.hidden, inter = m.intermediate;
  const GatedActivation& act = m.weights.activation;
  const bool fused = m.weights.fused();
  std::vector<double> out(m.n * hidden);
  for (int64_t t = 0; t < m.n; ++t) {
    const float* x = m.x.data() + t * hidden;
    std::vector<double> a(inter);
    for (int64_t j = 0; j < inter; ++j) {
      // Fused: rows 2j and 2j + 1 of gate_up (and its bias).
      const double* g_row = fused ? &m.gate_up.values[2 * j * hidden]
                                  : &m.gate.values[j * hidden];
      const double* u_row = fused ? &m.gate_up.values[(2 * j + 1) * hidden]
                                  : &m.up.values[j * hidden];
      double g = 0, u = 0;
      if (!m.gate_up_bias.empty()) {
        g = m.gate_up_bias[2 * j];
        u = m.gate_up_bias[2 * j + 1];
      }
      for (int64_t d = 0; d < hidden; ++d) {
        g += double{x[d]} * g_row[d];
        u += double{x[d]} * u_row[d];
      }
      if (act.kind == GatedActivation::Kind::kClampedSwiglu) {
        *clamped += (g > act.limit) + (std::abs(u) > act.limit);
        g = std::min(g, double{act.limit});
        u = std::clamp(u, -double{act.limit}, double{act.limit});
        a[j] = (u + 1) * g / (1 + std::exp(-double{act.alpha} * g));
      } else {
        a[j] = g / (1 + std::exp(-g)) * u;
      }
    }
    for (int64_t d = 0; d < hidden; ++d) {
      double acc = m.down_bias.empty() ? 0.0 : m.down_bias[d];
      for (int64_t j = 0; j < inter; ++j) {
        acc += m.down.values[d * inter + j] * a[j];
      }
      out[t * hidden + d] = acc;
    }
  }
  return out;
}

// Several MLPs in one call: separate gate and up with silu (most experts),
// gpt-oss's fused interleaved gate_up with its bias, the clamped SwiGLU
// and a down bias, and the other combinations the interface allows; at
// row counts on both sides of the CUDA backend's fused products.
TEST_P(BackendConformanceTest, RunMlpsMatchesADoubleReference) {
  std::mt19937 rng(7);
  struct Case {
    bool fused;
    GatedActivation::Kind kind;
    bool biases;
    int64_t n;
  };
  constexpr auto kSilu = GatedActivation::Kind::kSilu;
  constexpr auto kClamped = GatedActivation::Kind::kClampedSwiglu;
  const Case cases[] = {
      {false, kSilu, false, 1},    {false, kSilu, false, 8},
      {false, kSilu, false, 33},   {true, kClamped, true, 3},
      {true, kClamped, true, 9},   {true, kSilu, false, 5},
      {false, kClamped, true, 12},
  };
  for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
    // Columns of the gate and up products (hidden) and the down product
    // (intermediate) multiples of 8 and not.
    for (const auto& [hidden, inter] : {std::pair{40, 53}, std::pair{67, 80}}) {
      std::vector<Mlp> mlps(std::size(cases));
      std::vector<MlpTask> tasks;
      int64_t weight_bytes = 0;
      double flops = 0;
      for (size_t i = 0; i < mlps.size(); ++i) {
        const Case& c = cases[i];
        Mlp& m = mlps[i];
        m.hidden = hidden;
        m.intermediate = inter;
        m.n = c.n;
        MlpWeights& w = m.weights;
        if (c.fused) {
          m.gate_up = MakeTestWeight({type}, 2 * inter, hidden, &rng);
          w.gate_up = Upload(m.gate_up.weight);
          weight_bytes += StoredBytes(m.gate_up.weight);
        } else {
          m.gate = MakeTestWeight({type}, inter, hidden, &rng);
          m.up = MakeTestWeight({type}, inter, hidden, &rng);
          w.gate = Upload(m.gate.weight);
          w.up = Upload(m.up.weight);
          weight_bytes += StoredBytes(m.gate.weight) + StoredBytes(m.up.weight);
        }
        m.down = MakeTestWeight({type}, hidden, inter, &rng);
        w.down = Upload(m.down.weight);
        weight_bytes += StoredBytes(m.down.weight);
        flops += 2.0 * c.n * 3 * inter * hidden;
        if (c.biases) {
          if (c.fused) {
            m.gate_up_bias = Random(2 * inter, &rng);
            w.gate_up_bias = Upload(m.gate_up_bias);
          }
          m.down_bias = Random(hidden, &rng);
          w.down_bias = Upload(m.down_bias);
        }
        w.activation.kind = c.kind;
        // Larger inputs under the clamped SwiGLU, so that its clamps act.
        m.x = Random(c.n * hidden, &rng, c.kind == kClamped ? 3.f : 1.f);
        m.x_tensor = Put(m.x, c.n, hidden);
        m.out = Poisoned(c.n, hidden);
        tasks.push_back({&m.weights, m.x_tensor, m.out});
      }
      Work work;
      backend().set_work(&work);
      backend().RunMlps(tasks);
      backend().set_work(nullptr);
      const std::string what =
          absl::StrCat(kernels::WeightTypeName(type), " hidden ", hidden);
      EXPECT_EQ(work.weight_bytes, weight_bytes) << what;
      EXPECT_EQ(work.flops, flops) << what;
      int clamped = 0;
      for (size_t i = 0; i < mlps.size(); ++i) {
        ExpectNear(Get(mlps[i].out), ReferenceMlp(mlps[i], &clamped),
                   kMlpTolerance, absl::StrCat(what, " mlp ", i));
      }
      EXPECT_GT(clamped, 0) << what;
    }
  }
}

// A MoE layer's routed experts routed and run by the backend from router
// logits, for every routing scheme the architectures use (Mixtral's and
// Qwen's softmax top-k with and without renormalisation, gpt-oss's top-k
// then softmax with fused, biased, clamped experts, DeepSeek-V3's grouped
// sigmoid routing with a selection bias and scaling, DeepSeek-V2's
// group-limited greedy), every weight format, ragged widths and token
// counts: a backend that runs the job (a GPU's) matches the host Router's
// choice and the double-precision MLPs, combined in expert order, and
// counts the distinct experts' bytes; the CPU backends decline it.
TEST_P(BackendConformanceTest, RunRoutedExpertsMatchesHostRouting) {
  std::mt19937 rng(29);
  const bool runs_on_device = GetParam().rfind("cuda:", 0) == 0;
  struct Case {
    const char* name;
    int64_t experts, top_k;
    model::RoutingSpec routing;
    bool fused_clamped_biased;
    WeightFormat format;
    int64_t hidden, inter;
  };
  model::RoutingSpec mixtral;
  model::RoutingSpec qwen;
  qwen.renormalize = false;
  model::RoutingSpec gpt_oss;
  gpt_oss.order = model::RouterOrder::kTopKThenSoftmax;
  gpt_oss.router_bias = true;
  model::RoutingSpec deepseek_v3;
  deepseek_v3.scoring = model::RouterScoring::kSigmoid;
  deepseek_v3.num_groups = 4;
  deepseek_v3.topk_groups = 2;
  deepseek_v3.group_scoring = model::GroupScoring::kTopTwoSum;
  deepseek_v3.scaling_factor = 2.5;
  deepseek_v3.selection_bias = true;
  model::RoutingSpec deepseek_v2;
  deepseek_v2.num_groups = 4;
  deepseek_v2.topk_groups = 3;
  deepseek_v2.renormalize = false;
  deepseek_v2.scaling_factor = 16.0;
  const Case cases[] = {
      {"mixtral", 8, 2, mixtral, false, {WeightType::kBF16}, 64, 48},
      {"qwen", 12, 3, qwen, false, {WeightType::kInt4, 32}, 40, 24},
      {"gpt_oss", 6, 2, gpt_oss, true, {WeightType::kMxfp4}, 64, 40},
      {"deepseek_v3",
       16,
       4,
       deepseek_v3,
       false,
       {WeightType::kFp8E4M3, 0, 16, 32},
       64,
       32},
      {"deepseek_v2",
       16,
       6,
       deepseek_v2,
       false,
       {WeightType::kInt8, 64},
       36,
       20},
      {"f32", 5, 5, mixtral, false, {WeightType::kF32}, 24, 16},
      // So many experts that the CUDA kernel routes with few warps, each
      // taking several tokens in turn.
      {"many_experts", 1000, 3, mixtral, false, {WeightType::kBF16}, 16, 8},
  };
  for (const Case& c : cases) {
    std::vector<Mlp> mlps(c.experts);
    std::vector<MlpWeights> experts(c.experts);
    for (int64_t e = 0; e < c.experts; ++e) {
      Mlp& m = mlps[e];
      m.hidden = c.hidden;
      m.intermediate = c.inter;
      MlpWeights& w = experts[e];
      if (c.fused_clamped_biased) {
        m.gate_up = MakeTestWeight(c.format, 2 * c.inter, c.hidden, &rng);
        w.gate_up = Upload(m.gate_up.weight);
        m.gate_up_bias = Random(2 * c.inter, &rng);
        w.gate_up_bias = Upload(m.gate_up_bias);
        m.down_bias = Random(c.hidden, &rng);
        w.activation.kind = GatedActivation::Kind::kClampedSwiglu;
      } else {
        m.gate = MakeTestWeight(c.format, c.inter, c.hidden, &rng);
        m.up = MakeTestWeight(c.format, c.inter, c.hidden, &rng);
        w.gate = Upload(m.gate.weight);
        w.up = Upload(m.up.weight);
      }
      m.down = MakeTestWeight(c.format, c.hidden, c.inter, &rng);
      w.down = Upload(m.down.weight);
      if (!m.down_bias.empty()) w.down_bias = Upload(m.down_bias);
      m.weights = w;
    }
    const std::vector<float> selection_bias = Random(c.experts, &rng, 0.3f);
    for (const int64_t n :
         {int64_t{1}, int64_t{5}, int64_t{37}, kMaxRoutedTokens + 1}) {
      const std::string what =
          absl::StrCat(c.name, " ", FormatName(c.format), " ", n, " tokens");
      const std::vector<float> x_host = Random(n * c.hidden, &rng);
      const std::vector<float> logits_host = Random(n * c.experts, &rng, 2.f);
      const Backend::Buffer x = Put(x_host, n, c.hidden);
      const Backend::Buffer logits = Put(logits_host, n, c.experts);
      const Backend::Buffer out = Poisoned(n, c.hidden);
      RoutedExpertsJob job;
      job.x = x;
      job.logits = logits;
      job.top_k = c.top_k;
      job.routing = &c.routing;
      job.selection_bias =
          c.routing.selection_bias ? selection_bias.data() : nullptr;
      job.experts = experts;
      job.out = out;
      Work work;
      backend().set_work(&work);
      const bool ran = backend().RunRoutedExperts(job);
      backend().set_work(nullptr);
      EXPECT_EQ(ran, runs_on_device && n <= kMaxRoutedTokens) << what;
      if (!ran) {
        // Declined: nothing written.
        for (const float v : Get(out)) ASSERT_TRUE(std::isnan(v)) << what;
        continue;
      }
      const moe::Routing routing =
          moe::Router(c.experts, c.top_k, c.routing)
              .Route(logits_host.data(), n, job.selection_bias);
      // Every expert's MLP on every token, then each token's experts in
      // ascending order.
      std::vector<std::vector<double>> by_expert(c.experts);
      std::vector<bool> used(c.experts, false);
      std::vector<double> want(n * c.hidden, 0.0);
      int clamped = 0;
      for (int64_t e = 0; e < c.experts; ++e) {
        mlps[e].x = x_host;
        mlps[e].n = n;
        by_expert[e] = ReferenceMlp(mlps[e], &clamped);
      }
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < c.top_k; ++j) {
          const int32_t e = routing.experts[t * c.top_k + j];
          used[e] = true;
          for (int64_t d = 0; d < c.hidden; ++d) {
            want[t * c.hidden + d] += routing.weights[t * c.top_k + j] *
                                      by_expert[e][t * c.hidden + d];
          }
        }
      }
      ExpectNear(Get(out), want, kMlpTolerance, what);
      const int64_t distinct = std::count(used.begin(), used.end(), true);
      const int64_t expert_bytes =
          StoredBytes(experts[0].gate) + StoredBytes(experts[0].up) +
          StoredBytes(experts[0].gate_up) + StoredBytes(experts[0].down);
      EXPECT_EQ(work.weight_bytes, distinct * expert_bytes) << what;
      EXPECT_EQ(work.flops, 2.0 * n * c.top_k * 3 * c.inter * c.hidden) << what;
    }
  }
}

TEST_P(BackendConformanceTest, EmbedWidensRowsOfEveryFormat) {
  std::mt19937 rng(17);
  const std::vector<int32_t> tokens = {5, 0, 36, 5, 17};
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (const WeightFormat& format : AllWeightFormats()) {
    for (int64_t cols : {67, 96}) {
      const TestWeight host = MakeTestWeight(format, 37, cols, &rng);
      const Weight table = Upload(host.weight);
      const Backend::Buffer out = Poisoned(n, cols);
      Work work;
      backend().set_work(&work);
      backend().Embed(table, tokens, out);
      backend().set_work(nullptr);
      EXPECT_EQ(work.weight_bytes,
                n * kernels::RowBytes(format.type, cols, format.group_size));
      std::vector<double> want;
      for (int32_t token : tokens) {
        want.insert(want.end(), host.values.begin() + token * cols,
                    host.values.begin() + (token + 1) * cols);
      }
      ExpectNear(Get(out), want, kTolerance,
                 absl::StrCat(FormatName(format), " cols ", cols));
    }
  }
}

TEST_P(BackendConformanceTest, RmsNormInPlaceAndNot) {
  std::mt19937 rng(19);
  const float eps = 1e-6f;
  for (int64_t cols : {7, 67, 300, 1000}) {
    const int64_t rows = 5;
    const std::vector<float> x = Random(rows * cols, &rng, 2.f);
    const std::vector<float> weight_host = Random(cols, &rng);
    const Vector weight = Upload(weight_host);
    std::vector<double> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      double squares = 0;
      for (int64_t c = 0; c < cols; ++c) {
        squares += double{x[r * cols + c]} * x[r * cols + c];
      }
      const double scale = 1 / std::sqrt(squares / cols + eps);
      for (int64_t c = 0; c < cols; ++c) {
        want[r * cols + c] = x[r * cols + c] * scale * weight_host[c];
      }
    }
    const Backend::Buffer in = Put(x, rows, cols);
    const Backend::Buffer out = Poisoned(rows, cols);
    backend().RmsNorm(in, weight, eps, out);
    ExpectNear(Get(out), want, kTolerance, absl::StrCat("cols ", cols));
    backend().RmsNorm(in, weight, eps, in);
    ExpectNear(Get(in), want, kTolerance,
               absl::StrCat("in place, cols ", cols));
  }
}

// The residual add and the norm after it: x holds x + delta afterwards (as
// Add leaves it, exactly), y its normalised rows; lengths that are
// multiples of four (whole float4 loads) and not.
TEST_P(BackendConformanceTest, AddRmsNormAddsThenNormalises) {
  std::mt19937 rng(20);
  const float eps = 1e-5f;
  for (int64_t cols : {7, 68, 300, 1001}) {
    const int64_t rows = 3;
    const std::vector<float> x_host = Random(rows * cols, &rng, 2.f);
    const std::vector<float> delta_host = Random(rows * cols, &rng, 2.f);
    const std::vector<float> weight_host = Random(cols, &rng);
    const Vector weight = Upload(weight_host);
    std::vector<float> sum(rows * cols);
    std::vector<double> sum_want(rows * cols), want(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      double squares = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        sum[i] = x_host[i] + delta_host[i];
        sum_want[i] = sum[i];
        squares += double{sum[i]} * sum[i];
      }
      const double scale = 1 / std::sqrt(squares / cols + eps);
      for (int64_t c = 0; c < cols; ++c) {
        want[r * cols + c] = sum[r * cols + c] * scale * weight_host[c];
      }
    }
    const Backend::Buffer x = Put(x_host, rows, cols);
    const Backend::Buffer delta = Put(delta_host, rows, cols);
    const Backend::Buffer y = Poisoned(rows, cols);
    backend().AddRmsNorm(x, delta, weight, eps, y);
    ExpectNear(Get(x), sum_want, 0, absl::StrCat("sum, cols ", cols));
    ExpectNear(Get(y), want, kTolerance, absl::StrCat("cols ", cols));
  }
}

// Element-wise operations on the middle rows of a tensor: the rows around
// them must stay as they were.
TEST_P(BackendConformanceTest, AddBiasTouchesOnlyItsRows) {
  std::mt19937 rng(21);
  const int64_t rows = 5, cols = 67;
  const std::vector<float> y_host = Random(rows * cols, &rng);
  const std::vector<float> bias_host = Random(cols, &rng);
  const Vector bias = Upload(bias_host);
  const Backend::Buffer y = Put(y_host, rows, cols);
  backend().AddBias(y.tensor().Rows(1, 3), bias);
  std::vector<double> want(y_host.begin(), y_host.end());
  for (int64_t r = 1; r < 4; ++r) {
    for (int64_t c = 0; c < cols; ++c) want[r * cols + c] += bias_host[c];
  }
  ExpectNear(Get(y), want, kTolerance, "add bias");
}

TEST_P(BackendConformanceTest, AddAddsElementwise) {
  std::mt19937 rng(22);
  const int64_t rows = 9, cols = 67;
  const std::vector<float> y_host = Random(rows * cols, &rng);
  const std::vector<float> x_host = Random(rows * cols, &rng);
  const Backend::Buffer y = Put(y_host, rows, cols);
  const Backend::Buffer x = Put(x_host, rows, cols);
  backend().Add(y, x);
  std::vector<double> want(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    want[i] = double{y_host[i]} + x_host[i];
  }
  ExpectNear(Get(y), want, kTolerance, "add");
}

TEST_P(BackendConformanceTest, ClampTouchesOnlyItsRows) {
  std::mt19937 rng(23);
  const int64_t rows = 5, cols = 67;
  const float limit = 2.5f;
  const std::vector<float> y_host = Random(rows * cols, &rng, 3.f);
  const Backend::Buffer y = Put(y_host, rows, cols);
  backend().Clamp(y.tensor().Rows(1, 3), limit);
  std::vector<double> want(y_host.begin(), y_host.end());
  int clamped = 0;
  for (int64_t i = cols; i < 4 * cols; ++i) {
    clamped += std::abs(want[i]) > limit;
    want[i] = std::clamp<double>(want[i], -limit, limit);
  }
  EXPECT_GT(clamped, 0);
  ExpectNear(Get(y), want, 0, "clamp");
}

TEST_P(BackendConformanceTest, SetZeroTouchesOnlyItsRows) {
  std::mt19937 rng(24);
  const int64_t rows = 5, cols = 67;
  const std::vector<float> y_host = Random(rows * cols, &rng);
  const Backend::Buffer y = Put(y_host, rows, cols);
  backend().SetZero(y.tensor().Rows(1, 3));
  std::vector<double> want(y_host.begin(), y_host.end());
  std::fill(want.begin() + cols, want.begin() + 4 * cols, 0.0);
  ExpectNear(Get(y), want, 0, "set zero");
}

TEST_P(BackendConformanceTest, ApplyRotaryRotatesEverySlotLayout) {
  std::mt19937 rng(5);
  const int64_t rows = 3;
  const RotarySlots layouts[] = {
      {2, 8, 0, 8, false},    // whole heads, rotate-half
      {3, 11, 2, 8, false},   // partial heads at an offset
      {3, 11, 3, 8, true},    // interleaved
      {4, 64, 0, 64, false},  // Llama's heads of 64
      {2, 72, 8, 64, false},  // rotary dimensions inside wider heads
      {3, 40, 24, 16, true},  // MLA's rope part after each nope part
  };
  // The layouts of one dimension in one call (as a layer's queries and keys
  // come), each in its own tensor.
  for (const int64_t dim : {8, 64, 16}) {
    const int64_t half = dim / 2;
    const std::vector<float> angles = Random(rows * half, &rng, 2.f);
    std::vector<float> cos_host(rows * half), sin_host(rows * half);
    for (size_t i = 0; i < angles.size(); ++i) {
      cos_host[i] = std::cos(angles[i]);
      sin_host[i] = std::sin(angles[i]);
    }
    const Backend::Buffer cos = Put(cos_host, rows, half);
    const Backend::Buffer sin = Put(sin_host, rows, half);
    std::vector<RotarySlots> used;
    std::vector<std::vector<double>> want;
    std::vector<Backend::Buffer> x;
    std::vector<RotaryTarget> targets;
    for (const RotarySlots& slots : layouts) {
      if (slots.dim != dim) continue;
      const int64_t cols = slots.offset + slots.count * slots.stride;
      const std::vector<float> x_host = Random(rows * cols, &rng);
      std::vector<double>& w = want.emplace_back(x_host.begin(), x_host.end());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < slots.count; ++h) {
          const int64_t base = r * cols + slots.offset + h * slots.stride;
          for (int64_t j = 0; j < half; ++j) {
            const int64_t a = slots.interleaved ? base + 2 * j : base + j;
            const int64_t b = slots.interleaved ? a + 1 : base + j + half;
            const double c = cos_host[r * half + j];
            const double s = sin_host[r * half + j];
            w[a] = double{x_host[a]} * c - double{x_host[b]} * s;
            w[b] = double{x_host[b]} * c + double{x_host[a]} * s;
          }
        }
      }
      x.push_back(Put(x_host, rows, cols));
      used.push_back(slots);
      targets.push_back({x.back(), slots});
    }
    backend().ApplyRotary(targets, cos, sin);
    for (size_t k = 0; k < targets.size(); ++k) {
      ExpectNear(Get(x[k]), want[k], kTolerance,
                 absl::StrCat("rotary dim ", dim, " offset ", used[k].offset,
                              used[k].interleaved ? " interleaved" : ""));
    }
  }
}

// Writes of several sources in one call (five: more than the CUDA
// backend's four a launch; one of no rows), each row to its own row of two
// destination tensors, at column offsets; everything else stays.
TEST_P(BackendConformanceTest, WriteRowsWritesThroughRowPointers) {
  std::mt19937 rng(25);
  const int64_t a_rows = 40, a_cols = 21, b_rows = 30, b_cols = 32;
  std::vector<float> a_host = Random(a_rows * a_cols, &rng);
  std::vector<float> b_host = Random(b_rows * b_cols, &rng);
  const Backend::Buffer a = Put(a_host, a_rows, a_cols);
  const Backend::Buffer b = Put(b_host, b_rows, b_cols);
  // Write k: rows_of[k] rows of cols_of[k] floats, into a (k even) or b at
  // column offset k.
  const int64_t rows_of[] = {4, 1, 0, 3, 2};
  const int64_t cols_of[] = {21, 9, 5, 17, 20};
  std::vector<Backend::Buffer> src;
  std::vector<std::vector<float*>> dst(5);
  std::vector<RowWrite> writes;
  int64_t next_a = 0, next_b = 29;
  for (int k = 0; k < 5; ++k) {
    const int64_t n = rows_of[k], cols = cols_of[k];
    const std::vector<float> src_host = Random(n * cols, &rng);
    for (int64_t i = 0; i < n; ++i) {
      const bool to_a = k % 2 == 0;
      const int64_t row = to_a ? next_a++ * 3 % a_rows : next_b--;
      const int64_t offset = to_a ? 0 : k;
      dst[k].push_back((to_a ? a : b).tensor().row(row) + offset);
      float* host_row =
          to_a ? &a_host[row * a_cols] : &b_host[row * b_cols + offset];
      std::copy_n(&src_host[i * cols], cols, host_row);
    }
    src.push_back(Put(src_host, n, cols));
    writes.push_back({src.back(), dst[k]});
  }
  backend().WriteRows(writes);
  ExpectNear(Get(a), std::vector<double>(a_host.begin(), a_host.end()), 0,
             "first tensor");
  ExpectNear(Get(b), std::vector<double>(b_host.begin(), b_host.end()), 0,
             "second tensor");
}

TEST_P(BackendConformanceTest, GatherRowsRepeatsRows) {
  std::mt19937 rng(26);
  const int64_t cols = 33;
  const std::vector<float> x_host = Random(6 * cols, &rng);
  const std::vector<int32_t> rows = {5, 0, 5, 2, 3};
  const Backend::Buffer x = Put(x_host, 6, cols);
  const Backend::Buffer out = Poisoned(rows.size(), cols);
  backend().GatherRows(x, rows, out);
  std::vector<double> want;
  for (int32_t r : rows) {
    want.insert(want.end(), x_host.begin() + r * cols,
                x_host.begin() + (r + 1) * cols);
  }
  ExpectNear(Get(out), want, 0, "gather rows");
}

// Greedy decoding's token, every rule of kernels::GreedyToken, on rows of
// many widths (one thread's columns, several warps', a vocabulary's): the
// first maximum, NaN never chosen, +inf tying FLT_MAX, -0 tying +0, -1 when
// nothing is above -inf.
TEST_P(BackendConformanceTest, GreedyTokensFollowTheSamplersRule) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kMax = std::numeric_limits<float>::max();
  std::mt19937 rng(29);
  for (const int64_t cols : {1, 5, 31, 256, 257, 1000, 4099, 151936}) {
    std::vector<std::vector<float>> rows;
    rows.push_back(Random(cols, &rng, 4.f));  // almost surely one maximum
    std::vector<float> ties = Random(cols, &rng);
    for (int64_t c = cols / 3; c < cols; c += std::max<int64_t>(cols / 5, 1)) {
      ties[c] = 9.f;  // the first of these wins
    }
    rows.push_back(ties);
    std::vector<float> odd = Random(cols, &rng);
    for (int64_t c = 0; c < cols; c += 3) odd[c] = NAN;
    odd[cols - 1] = 7.f;  // the last column wins over NaNs
    rows.push_back(odd);
    std::vector<float> infinite = Random(cols, &rng);
    infinite[cols - 1] = kInf;
    infinite[(cols - 1) / 2] = kMax;  // ties +inf, and comes first
    rows.push_back(infinite);
    std::vector<float> zeros(cols, -kInf);
    zeros[cols - 1] = 0.f;
    zeros[(cols - 1) / 2] = -0.f;
    rows.push_back(zeros);
    rows.push_back(std::vector<float>(cols, -kInf));
    std::vector<float> nothing(cols, NAN);
    nothing[0] = -kInf;
    rows.push_back(nothing);

    std::vector<float> host;
    std::vector<int32_t> want;
    for (const std::vector<float>& row : rows) {
      host.insert(host.end(), row.begin(), row.end());
      std::vector<float> ranked(row.size());
      std::transform(row.begin(), row.end(), ranked.begin(), [&](float v) {
        return std::isnan(v) ? -kInf : std::min(v, kMax);
      });
      const auto best = std::max_element(ranked.begin(), ranked.end());
      want.push_back(
          *best == -kInf ? -1 : static_cast<int32_t>(best - ranked.begin()));
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    const Backend::Buffer logits = Put(host, n, cols);
    const Backend::Buffer tokens = Poisoned(n, 1);
    backend().GreedyTokens(logits, tokens);
    const std::vector<float> bits = Get(tokens);
    std::vector<int32_t> got(n);
    std::memcpy(got.data(), bits.data(), n * sizeof(int32_t));
    EXPECT_EQ(got, want) << cols << " columns";
  }
}

// Repeated destinations (a token's experts adding into its row) must all
// arrive.
TEST_P(BackendConformanceTest, AddScaledRowsAddsRepeatedRows) {
  std::mt19937 rng(27);
  const int64_t cols = 67;
  const std::vector<int32_t> rows = {4, 0, 4, 2, 4, 1};
  const std::vector<float> scales = {0.5f, -2.f, 0.25f, 3.f, 1.5f, -0.75f};
  const std::vector<float> src_host = Random(rows.size() * cols, &rng);
  const std::vector<float> y_host = Random(5 * cols, &rng);
  const Backend::Buffer src = Put(src_host, rows.size(), cols);
  const Backend::Buffer y = Put(y_host, 5, cols);
  backend().AddScaledRows(src, rows, scales, y);
  std::vector<double> want(y_host.begin(), y_host.end());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      want[rows[i] * cols + c] += double{scales[i]} * src_host[i * cols + c];
    }
  }
  ExpectNear(Get(y), want, kTolerance, "add scaled rows");
}

TEST_P(BackendConformanceTest, AddSigmoidGatedMatchesADoubleReference) {
  std::mt19937 rng(28);
  for (int64_t cols : {7, 300}) {
    const int64_t n = 5;
    const std::vector<float> src_host = Random(n * cols, &rng);
    const std::vector<float> x_host = Random(n * cols, &rng);
    const std::vector<float> y_host = Random(n * cols, &rng);
    // Logits of a few units: gates well inside (0, 1).
    const std::vector<float> gate_host =
        Random(cols, &rng, 2.f / std::sqrt(static_cast<float>(cols)));
    const Vector gate = Upload(gate_host);
    const Backend::Buffer src = Put(src_host, n, cols);
    const Backend::Buffer x = Put(x_host, n, cols);
    const Backend::Buffer y = Put(y_host, n, cols);
    backend().AddSigmoidGated(src, x, gate, y);
    std::vector<double> want(n * cols);
    for (int64_t t = 0; t < n; ++t) {
      double logit = 0;
      for (int64_t c = 0; c < cols; ++c) {
        logit += double{x_host[t * cols + c]} * gate_host[c];
      }
      for (int64_t c = 0; c < cols; ++c) {
        want[t * cols + c] = y_host[t * cols + c] +
                             src_host[t * cols + c] / (1 + std::exp(-logit));
      }
    }
    ExpectNear(Get(y), want, kTolerance, absl::StrCat("cols ", cols));
  }
}

void BackendConformanceTest::CheckAttention(const AttentionCase& c,
                                            int64_t window, bool with_sinks,
                                            std::mt19937* rng) {
  const int64_t kvw = c.kv_heads * c.head_dim;
  const int64_t qw = c.heads * c.head_dim, bs = c.block_size;
  const size_t num_sequences = c.lengths.size();
  std::vector<int32_t> sequence_of;
  std::vector<int64_t> position_of;
  // The lowest position any of the sequence's tokens attends.
  std::vector<int64_t> lowest(num_sequences);
  int64_t total_blocks = 0;
  for (size_t s = 0; s < num_sequences; ++s) {
    const int64_t first_new = c.lengths[s] - c.new_tokens[s];
    for (int64_t p = first_new; p < c.lengths[s]; ++p) {
      sequence_of.push_back(static_cast<int32_t>(s));
      position_of.push_back(p);
    }
    lowest[s] = window > 0 ? std::max<int64_t>(0, first_new + 1 - window) : 0;
    total_blocks += (c.lengths[s] + bs - 1) / bs * (c.shared_kv ? 1 : 2);
  }
  // Every block from one cache tensor, in shuffled order: nothing may
  // rely on a sequence's blocks being adjacent or in order.
  std::vector<int64_t> order(total_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), *rng);
  const std::vector<float> cache_host = Random(total_blocks * bs * kvw, rng);
  const Backend::Buffer cache = Put(cache_host, total_blocks * bs, kvw);
  std::vector<std::vector<const float*>> k_blocks(num_sequences),
      v_blocks(num_sequences);
  std::vector<HostKv> host(num_sequences);
  int64_t next = 0;
  const auto block = [&](int64_t i) {
    return cache_host.begin() + i * bs * kvw;
  };
  for (size_t s = 0; s < num_sequences; ++s) {
    const int64_t blocks = (c.lengths[s] + bs - 1) / bs;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k = order[next++];
      const int64_t v = c.shared_kv ? k : order[next++];
      // Blocks below every token's window may be null (freed).
      const bool freed = (b + 1) * bs <= lowest[s];
      k_blocks[s].push_back(freed ? nullptr : cache.tensor().row(k * bs));
      v_blocks[s].push_back(freed ? nullptr : cache.tensor().row(v * bs));
      host[s].keys.insert(host[s].keys.end(), block(k), block(k + 1));
      host[s].values.insert(host[s].values.end(), block(v), block(v + 1));
    }
  }
  std::vector<KvBlocks> sequences;
  for (size_t s = 0; s < num_sequences; ++s) {
    sequences.push_back({k_blocks[s].data(), v_blocks[s].data(), bs});
  }
  const int64_t n = static_cast<int64_t>(position_of.size());
  const std::vector<float> q_host = Random(n * qw, rng);
  const std::vector<float> sinks_host = Random(c.heads, rng, 2.f);
  const Backend::Buffer q = Put(q_host, n, qw);
  const Backend::Buffer out = Poisoned(n, qw);
  AttentionJob job;
  job.q = q;
  job.heads = c.heads;
  job.kv_heads = c.kv_heads;
  job.head_dim = c.head_dim;
  job.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  job.window = window;
  job.sequences = sequences;
  job.sequence_of = sequence_of;
  job.position_of = position_of;
  if (with_sinks) job.sinks = Upload(sinks_host);
  job.out = out;
  backend().Attend(job);
  ExpectNear(
      Get(out),
      ReferenceAttention(job, q_host, host,
                         with_sinks ? sinks_host : std::vector<float>()),
      kAttentionTolerance,
      absl::StrCat("heads ", c.heads, "/", c.kv_heads, " head_dim ", c.head_dim,
                   " window ", window, with_sinks ? " sinks" : ""));
}

TEST_P(BackendConformanceTest, AttendMatchesADoubleReference) {
  std::mt19937 rng(3);
  const AttentionCase cases[] = {
      // Chunks of several tokens in three sequences (prefill beside
      // decode), blocks crossed within a chunk.
      {4, 2, 64, 16, {37, 5, 70}, {9, 2, 4}, 20},
      // Decode: one token each over long histories (on the CPU, fewer
      // tokens than threads: positions split over threads and merged).
      {8, 2, 64, 16, {300, 129}, {1, 1}, 100},
      // Ragged head_dim and block size; a whole prompt in one step.
      {6, 3, 24, 5, {23, 11}, {23, 4}, 8},
      {2, 2, 256, 4, {13}, {13}, 6},
      // MLA: one latent kv head of 576 read as both key and value.
      {4, 1, 576, 16, {40, 17}, {5, 3}, 24, true},
  };
  for (const AttentionCase& c : cases) {
    for (int64_t window : {int64_t{0}, c.window}) {
      for (bool with_sinks : {false, true}) {
        CheckAttention(c, window, with_sinks, &rng);
      }
    }
  }
}

// Queries taken into latent space through kv_b's key rows and attended
// latents taken out through its value rows, per head; 1 token and more
// than one CUDA block of 8.
TEST_P(BackendConformanceTest, MlaAbsorbAndExpandMatchADoubleReference) {
  std::mt19937 rng(13);
  struct Case {
    int64_t lora, nope, rope, v_dim, heads;
    WeightFormat fp8;
  };
  const Case cases[] = {
      // Ragged: a latent of more than one 128-column CUDA block, not a
      // multiple of it.
      {160, 24, 8, 20, 3, {WeightType::kFp8E4M3, 0, 16, 32}},
      // DeepSeek-V3's head shapes (fewer heads), its fp8 blocks.
      {512, 128, 64, 128, 2, {WeightType::kFp8E4M3, 0, 128, 128}},
  };
  for (const Case& c : cases) {
    model::MlaSpec mla;
    mla.kv_lora_rank = c.lora;
    mla.qk_nope_head_dim = c.nope;
    mla.qk_rope_head_dim = c.rope;
    mla.v_head_dim = c.v_dim;
    const int64_t heads = c.heads, qk = mla.qk_head_dim();
    const int64_t row = mla.cache_width(), per_head = c.nope + c.v_dim;
    for (const WeightFormat& format :
         {WeightFormat{WeightType::kF32}, WeightFormat{WeightType::kBF16},
          c.fp8}) {
      const TestWeight host =
          MakeTestWeight(format, heads * per_head, c.lora, &rng);
      const Weight kv_b = Upload(host.weight);
      const std::vector<double>& w = host.values;
      for (int64_t n : {1, 11}) {
        const std::string what =
            absl::StrCat(FormatName(format), " lora ", c.lora, " tokens ", n);
        const std::vector<float> q_host = Random(n * heads * qk, &rng);
        const Backend::Buffer q = Put(q_host, n, heads * qk);
        const Backend::Buffer absorbed = Poisoned(n, heads * row);
        backend().AbsorbMlaQueries(q, kv_b, mla, heads, absorbed);
        std::vector<double> want(n * heads * row, 0.0);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            const float* qh = &q_host[(t * heads + h) * qk];
            double* out = &want[(t * heads + h) * row];
            for (int64_t r = 0; r < c.nope; ++r) {
              for (int64_t k = 0; k < c.lora; ++k) {
                out[k] += double{qh[r]} * w[(h * per_head + r) * c.lora + k];
              }
            }
            for (int64_t r = 0; r < c.rope; ++r) {
              out[c.lora + r] = qh[c.nope + r];
            }
          }
        }
        ExpectNear(Get(absorbed), want, kTolerance, "absorbed " + what);

        const std::vector<float> attended_host = Random(n * heads * row, &rng);
        const Backend::Buffer attended = Put(attended_host, n, heads * row);
        const Backend::Buffer values = Poisoned(n, heads * c.v_dim);
        backend().ExpandMlaValues(attended, kv_b, mla, heads, values,
                                  /*batch_rows=*/0);
        std::vector<double> want_values(n * heads * c.v_dim, 0.0);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t e = 0; e < c.v_dim; ++e) {
              const int64_t r = h * per_head + c.nope + e;
              double sum = 0;
              for (int64_t k = 0; k < c.lora; ++k) {
                sum += double{attended_host[(t * heads + h) * row + k]} *
                       w[r * c.lora + k];
              }
              want_values[(t * heads + h) * c.v_dim + e] = sum;
            }
          }
        }
        ExpectNear(Get(values), want_values, kTolerance, "values " + what);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendConformanceTest,
                         ::testing::Values("cpu", "standin", "cuda:0"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name;
                         });

}  // namespace
}  // namespace ringmoe::backend
