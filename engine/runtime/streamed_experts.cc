#include "engine/runtime/streamed_experts.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/host_memory.h"
#include "base/status_macros.h"
#include "kernels/cpu/ops.h"
#include "memory_ring/disk_tier.h"

namespace ringmoe::runtime {
namespace {

constexpr uint64_t kPlaceAlign = 64;

uint64_t AlignUp(uint64_t n) {
  return (n + kPlaceAlign - 1) / kPlaceAlign * kPlaceAlign;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StreamedExperts>> StreamedExperts::Create(
    const model::ModelSpec& spec, const checkpoint::Checkpoint& checkpoint,
    model::ModelWeights* mutable_weights, const StreamingOptions& options,
    memory_ring::RingStats* stats, memory_ring::PlacementPlan* plan) {
  const model::ModelWeights& weights = *mutable_weights;
  std::unique_ptr<StreamedExperts> s(new StreamedExperts(spec, weights));
  s->options_ = options;
  s->stats_ = stats;
  const int num_layers = static_cast<int>(spec.num_layers);
  const int num_experts = static_cast<int>(spec.num_experts);

  // Each expert's stored parts, laid out one after the other in its place,
  // each read from wherever the bound weight points into the checkpoint:
  // that needs no tensor names, and an expert that is a slice of a tensor
  // fusing a layer's experts streams like one with tensors of its own.
  std::vector<std::string> paths;
  for (const auto& file : checkpoint.files()) paths.push_back(file->path());
  uint64_t expert_bytes_total = 0;
  // Experts with a part outside the checkpoint's mapping: converted or
  // rearranged on load, they have no bytes on disk to stream from. Their
  // records stay incomplete; Create fails before any is used.
  std::vector<std::pair<int, int>> not_in_checkpoint;
  s->streamed_.assign(num_layers, std::vector<StreamedExpert>(num_experts));
  for (int l = 0; l < num_layers; ++l) {
    if (!spec.layer_is_moe[l]) continue;
    for (int e = 0; e < num_experts; ++e) {
      model::MlpWeights bound = weights.layers[l].experts[e];
      StreamedExpert& streamed = s->streamed_[l][e];
      uint64_t offset = 0;
      bool in_checkpoint = true;
      // The piece of one part (-1: the matrix has no such part, or it is
      // not in the checkpoint).
      auto add_piece = [&](const void* part, int64_t bytes) {
        if (part == nullptr) return -1;
        const uint64_t size = static_cast<uint64_t>(bytes);
        const uint64_t dst_offset = offset;
        offset = AlignUp(offset + size);
        expert_bytes_total += size;
        const auto copy = weights.aligned_copy_of.find(part);
        const std::optional<checkpoint::Checkpoint::FileLocation> at =
            checkpoint.Locate(
                copy == weights.aligned_copy_of.end() ? part : copy->second,
                size);
        if (!at) {
          in_checkpoint = false;
          return -1;
        }
        streamed.pieces.push_back({at->file, at->offset, size, dst_offset});
        return static_cast<int>(streamed.pieces.size()) - 1;
      };
      for (const backend::Weight* m : model::MlpMatrices(&bound)) {
        MatrixPieces& parts = streamed.matrices.emplace_back();
        parts.data = add_piece(m->data, backend::DataBytes(*m));
        parts.scales = add_piece(m->scales, backend::GroupScaleBytes(*m));
        parts.block_scales =
            add_piece(m->block_scales, backend::BlockScaleBytes(*m));
        parts.exponents = add_piece(m->exponents, backend::ExponentBytes(*m));
      }
      if (!in_checkpoint) not_in_checkpoint.emplace_back(l, e);
      s->expert_stride_ = std::max(s->expert_stride_, offset);
    }
  }

  // Experts this executor does not serve stay out of the plan: the plan
  // marks them resident, and CopyOutOfCheckpoint leaves them unread.
  std::vector<int32_t> served = options.served_experts;
  if (served.empty()) {
    for (int e = 0; e < num_experts; ++e) served.push_back(e);
  }
  s->served_.assign(num_experts, false);
  for (int32_t e : served) s->served_[e] = true;
  memory_ring::PlacementInput input;
  input.always_resident_bytes = checkpoint.total_bytes() - expert_bytes_total;
  input.num_layers = num_layers;
  input.experts_per_layer = num_experts;
  for (int l = 0; l < num_layers; ++l) {
    if (!spec.layer_is_moe[l]) continue;
    for (int32_t e : served) input.experts.push_back({l, e, s->expert_stride_});
  }
  input.budget_bytes = options.memory_budget;
  input.num_slots = options.num_slots;
  input.section_experts = options.section_experts;
  input.experts_per_token = static_cast<int>(spec.experts_per_token);
  input.expert_cache = options.expert_cache;
  input.force_streaming = options.force_streaming;
  ASSIGN_OR_RETURN(*plan, memory_ring::PlanPlacement(input));
  stats->bytes_resident = plan->resident_bytes;
  stats->bytes_streamed = plan->streamed_bytes;
  if (!plan->streams()) return std::unique_ptr<StreamedExperts>();
  for (const auto& [l, e] : not_in_checkpoint) {
    if (plan->expert_resident[l][e]) continue;
    return absl::UnimplementedError(absl::StrCat(
        "cannot stream the experts from disk: the weights of layer ", l,
        " expert ", e,
        " were converted or rearranged on load (--weight_dtype converts "
        "them), so they are not the checkpoint's bytes; give the model a "
        "larger memory budget or use --weight_dtype=auto"));
  }
  s->resident_ = plan->expert_resident;
  // What stays resident is read from memory of its own (2 MiB pages), not
  // from the mapping whose pages the page cache may give back.
  RETURN_IF_ERROR(model::CopyOutOfCheckpoint(
      checkpoint,
      [&](int l, int e) { return s->served_[e] && !s->Streams(l, e); },
      /*pool=*/nullptr, mutable_weights));

  ASSIGN_OR_RETURN(s->tier_,
                   memory_ring::CreateDiskTier(
                       paths, {options.io_threads, options.direct_io}));
  const int depth = std::min(options.prefetch_depth, plan->num_slots - 1);
  s->section_experts_ = plan->section_experts;
  ASSIGN_OR_RETURN(s->ring_, memory_ring::SectionRing::Create(
                                 s->tier_.get(), plan->slot_bytes,
                                 {plan->num_slots, depth}, stats));
  if (options.expert_cache) {
    ASSIGN_OR_RETURN(s->cache_, memory_ring::ExpertCache::Create(
                                    s->tier_.get(), plan->cache_bytes,
                                    s->expert_stride_, stats));
  }
  s->layers_.resize(num_layers);
  return s;
}

StreamedExperts::~StreamedExperts() {
  // The ring waits for loads in flight before the tier goes away.
  ring_.reset();
}

std::vector<memory_ring::CopyPiece> StreamedExperts::PiecesFor(
    int layer, absl::Span<const int32_t> experts, size_t first) const {
  std::vector<memory_ring::CopyPiece> pieces;
  for (size_t i = 0; i < experts.size(); ++i) {
    for (memory_ring::CopyPiece p : streamed_[layer][experts[i]].pieces) {
      p.dst_offset += (first + i) * expert_stride_;
      pieces.push_back(p);
    }
  }
  return pieces;
}

void StreamedExperts::Schedule(int layer, absl::Span<const int32_t> experts) {
  LayerState& st = layers_[layer];
  for (size_t i = 0; i < experts.size(); i += section_experts_) {
    const absl::Span<const int32_t> group =
        experts.subspan(i, section_experts_);
    for (int32_t e : group) st.scheduled[e] = true;
    st.sections.push_back({ring_->Enqueue(PiecesFor(layer, group)),
                           std::vector<int32_t>(group.begin(), group.end())});
  }
}

model::MlpWeights StreamedExperts::ViewAt(int layer, int expert,
                                          const uint8_t* base) const {
  model::MlpWeights view = weights_.layers[layer].experts[expert];
  const StreamedExpert& streamed = streamed_[layer][expert];
  auto in_slot = [&](int piece) {
    return base + streamed.pieces[piece].dst_offset;
  };
  const absl::InlinedVector<backend::Weight*, 3> matrices =
      model::MlpMatrices(&view);
  for (size_t i = 0; i < matrices.size(); ++i) {
    backend::Weight& m = *matrices[i];
    const MatrixPieces& parts = streamed.matrices[i];
    m.data = in_slot(parts.data);
    if (parts.scales >= 0) {
      m.scales = reinterpret_cast<const uint16_t*>(in_slot(parts.scales));
    }
    if (parts.block_scales >= 0) {
      m.block_scales =
          reinterpret_cast<const float*>(in_slot(parts.block_scales));
    }
    if (parts.exponents >= 0) m.exponents = in_slot(parts.exponents);
  }
  return view;
}

void StreamedExperts::BeginStep(int64_t num_tokens) {
  expert_mode_ = options_.mode == RingMode::kExpert ||
                 (options_.mode == RingMode::kAuto &&
                  num_tokens * spec_.experts_per_token < spec_.num_experts);
  failed_ = false;
  const int num_experts = static_cast<int>(spec_.num_experts);
  for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
    LayerState& st = layers_[l];
    st.sections.clear();
    st.scheduled.assign(num_experts, false);
    st.views.resize(num_experts);
    if (expert_mode_ || !spec_.layer_is_moe[l]) continue;
    std::vector<int32_t> all;
    for (int e = 0; e < num_experts; ++e) {
      if (Streams(l, e)) all.push_back(e);
    }
    Schedule(l, all);
  }
}

void StreamedExperts::Predict(int layer,
                              const moe::Routing& predicted_routing) {
  if (!expert_mode_ || layer >= static_cast<int>(layers_.size()) ||
      !spec_.layer_is_moe[layer] || !layers_[layer].sections.empty()) {
    return;
  }
  std::vector<int64_t> tokens(spec_.num_experts, 0);
  for (int32_t e : predicted_routing.experts) ++tokens[e];
  std::vector<int32_t> predicted;
  for (int e = 0; e < spec_.num_experts; ++e) {
    if (tokens[e] > 0 && Streams(layer, e) &&
        !(cache_ && cache_->Contains(CacheKey(layer, e)))) {
      predicted.push_back(e);
    }
  }
  // The most-routed first; at most K-1 sections ahead, so a later miss of
  // the layer before always finds a slot whose section was released.
  std::stable_sort(predicted.begin(), predicted.end(),
                   [&](int32_t a, int32_t b) { return tokens[a] > tokens[b]; });
  const size_t ahead = (ring_->num_slots() - 1) * section_experts_;
  if (predicted.size() > ahead) predicted.resize(ahead);
  Schedule(layer, predicted);
}

absl::Status StreamedExperts::Run(int layer,
                                  absl::Span<const moe::ExpertTask> tasks,
                                  absl::Span<const backend::MlpTask> alongside,
                                  backend::Backend& backend) {
  LayerState& st = layers_[layer];
  std::vector<backend::MlpTask> now(alongside.begin(), alongside.end());
  std::vector<const moe::ExpertTask*> task_of(spec_.num_experts, nullptr);
  std::vector<int32_t> missed;
  for (const moe::ExpertTask& t : tasks) {
    const int32_t e = t.expert;
    if (!Streams(layer, e)) {
      now.push_back({&weights_.layers[layer].experts[e], t.x, t.out});
      continue;
    }
    if (const uint8_t* cached =
            cache_ ? cache_->Lookup(CacheKey(layer, e)) : nullptr) {
      st.views[e] = ViewAt(layer, e, cached);
      now.push_back({&st.views[e], t.x, t.out});
      continue;
    }
    task_of[e] = &t;
    if (st.scheduled[e]) {
      ++stats_->prefetch_hits;
    } else {
      ++stats_->prefetch_misses;
      missed.push_back(e);
    }
  }
  // What needs no ring computes while the first section loads.
  backend.RunMlps(now);
  absl::Status status = RunStreamed(layer, task_of, std::move(missed), backend);
  if (!status.ok()) {
    failed_ = true;
    return absl::Status(status.code(),
                        absl::StrCat("streaming the experts of layer ", layer,
                                     ": ", status.message()));
  }
  st.sections.clear();
  return absl::OkStatus();
}

absl::Status StreamedExperts::RunStreamed(
    int layer, absl::Span<const moe::ExpertTask* const> task_of,
    std::vector<int32_t> missed, backend::Backend& backend) {
  std::vector<Section>& sections = layers_[layer].sections;
  size_t next_miss = 0;
  for (Section& section : sections) {
    // Misses ride in the room the section leaves.
    const size_t take = std::min(section_experts_ - section.experts.size(),
                                 missed.size() - next_miss);
    const absl::Span<const int32_t> extra(missed.data() + next_miss, take);
    next_miss += take;
    if (take == 0 &&
        std::none_of(section.experts.begin(), section.experts.end(),
                     [&](int32_t e) { return task_of[e] != nullptr; })) {
      ring_->Release(section.ticket);  // not loaded if it had not started
      continue;
    }
    ASSIGN_OR_RETURN(
        uint8_t * slot,
        ring_->Acquire(section.ticket,
                       PiecesFor(layer, extra, section.experts.size())));
    section.experts.insert(section.experts.end(), extra.begin(), extra.end());
    RunSlot(layer, section.experts, slot, task_of, backend);
    ring_->Release(section.ticket);
  }
  // Misses the sections had no room for take turns in one more slot. Its
  // ticket comes after at most K-1 predicted sections of the next layer, so
  // its slot's previous section is one of this layer's, released above.
  memory_ring::SectionRing::Ticket ticket = -1;
  while (next_miss < missed.size()) {
    const size_t take = std::min(section_experts_, missed.size() - next_miss);
    const absl::Span<const int32_t> group(missed.data() + next_miss, take);
    next_miss += take;
    uint8_t* slot;
    if (ticket < 0) {
      ticket = ring_->Enqueue(PiecesFor(layer, group));
      sections.push_back({ticket, {}});
      ASSIGN_OR_RETURN(slot, ring_->Acquire(ticket));
    } else {
      ASSIGN_OR_RETURN(slot, ring_->Refill(ticket, PiecesFor(layer, group)));
    }
    RunSlot(layer, group, slot, task_of, backend);
  }
  if (ticket >= 0) ring_->Release(ticket);
  return absl::OkStatus();
}

void StreamedExperts::RunSlot(int layer, absl::Span<const int32_t> experts,
                              const uint8_t* slot,
                              absl::Span<const moe::ExpertTask* const> task_of,
                              backend::Backend& backend) {
  LayerState& st = layers_[layer];
  std::vector<backend::MlpTask> mlps;
  for (size_t i = 0; i < experts.size(); ++i) {
    const moe::ExpertTask* t = task_of[experts[i]];
    if (t == nullptr) continue;
    st.views[t->expert] = ViewAt(layer, t->expert, slot + i * expert_stride_);
    mlps.push_back({&st.views[t->expert], t->x, t->out});
  }
  backend.RunMlps(mlps);
  if (!expert_mode_ || !cache_) return;
  // A failed copy into the cache only costs a later transfer.
  for (size_t i = 0; i < experts.size(); ++i) {
    if (task_of[experts[i]] == nullptr) continue;
    cache_
        ->Offer(CacheKey(layer, experts[i]), slot + i * expert_stride_,
                expert_stride_)
        .IgnoreError();
  }
}

void StreamedExperts::EndStep() {
  bool outstanding = failed_;
  for (const LayerState& st : layers_) outstanding |= !st.sections.empty();
  // Sections scheduled but never used (a failed step): drop them all.
  if (outstanding) ring_->Reset();
  for (LayerState& st : layers_) st.sections.clear();
  failed_ = false;
}

}  // namespace ringmoe::runtime
