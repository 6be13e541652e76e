#include "engine/runtime/generation.h"

#include <memory>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/tokenizer/stream_decoder.h"

namespace ringmoe::runtime {
namespace {

struct ActiveSequence {
  size_t index = 0;
  SequenceId id = 0;
  std::optional<Sampler> sampler;
  std::unique_ptr<StopCriteria> stop;
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  std::vector<int32_t> next;  // the token fed at the next step
};

}  // namespace

absl::StatusOr<std::vector<GenerationResult>> Generate(
    Engine& engine, const std::vector<GenerationRequest>& requests,
    const TokenCallback& on_token) {
  const model::ModelSpec& spec = engine.spec();
  const tokenizer::Tokenizer* tok = engine.tokenizer();
  std::vector<GenerationResult> results(requests.size());
  std::vector<ActiveSequence> active;
  // Sequence ids this call owns; released on every exit path.
  std::vector<SequenceId> owned;
  absl::Cleanup release = [&] {
    for (SequenceId id : owned) engine.Release(id);
  };
  static SequenceId next_id = 1 << 30;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    if (r.prompt_ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, ": empty prompt"));
    }
    if (!r.params.stop_strings.empty() && tok == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i,
                       ": stop strings need a tokenizer, the model has none"));
    }
    ASSIGN_OR_RETURN(Sampler sampler,
                     Sampler::Create(r.params, spec.vocab_size));
    ActiveSequence s;
    s.index = i;
    s.id = next_id++;
    s.sampler.emplace(std::move(sampler));
    s.stop = std::make_unique<StopCriteria>(r.params, engine.eos_token_ids());
    if (tok) s.decoder = std::make_unique<tokenizer::StreamDecoder>(*tok, true);
    s.next = r.prompt_ids;
    owned.push_back(s.id);
    active.push_back(std::move(s));
  }
  std::vector<float> logits;
  std::vector<int32_t> greedy_tokens;
  while (!active.empty()) {
    std::vector<SequenceChunk> chunks;
    for (const ActiveSequence& s : active) {
      SequenceChunk chunk{s.id, s.next};
      chunk.greedy_token = s.sampler->SamplesGreedyToken();
      chunks.push_back(chunk);
    }
    RETURN_IF_ERROR(
        engine.Step(chunks, &logits, /*work=*/nullptr, &greedy_tokens));
    std::vector<ActiveSequence> still_active;
    // The step's outputs in chunk order: logits rows, and greedy tokens.
    size_t next_row = 0, next_greedy = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      ActiveSequence& s = active[i];
      GenerationResult& result = results[s.index];
      const int32_t token =
          chunks[i].greedy_token
              ? greedy_tokens[next_greedy++]
              : s.sampler->Sample(
                    absl::MakeConstSpan(logits).subspan(
                        next_row++ * spec.vocab_size, spec.vocab_size),
                    requests[s.index].prompt_ids, result.ids);
      if (token < 0) {
        return absl::InternalError(absl::StrCat(
            "request ", s.index,
            ": the model produced no finite logit to sample from"));
      }
      result.ids.push_back(token);
      const std::string piece = s.decoder ? s.decoder->Push(token) : "";
      ASSIGN_OR_RETURN(StopUpdate update, s.stop->Update(token, piece));
      std::string emitted = update.text;
      if (update.finish_reason != FinishReason::kNone) {
        // Bytes the decoder still holds (an unfinished UTF-8 sequence) end
        // the output, unless a stop string already cut it.
        if (!update.stop_string && s.decoder) emitted += s.decoder->Flush();
        result.finish_reason = update.finish_reason;
      }
      result.text += emitted;
      if (on_token) on_token(s.index, token, emitted);
      if (update.finish_reason != FinishReason::kNone) continue;
      s.next = {token};
      still_active.push_back(std::move(s));
    }
    active = std::move(still_active);
  }
  return results;
}

}  // namespace ringmoe::runtime
