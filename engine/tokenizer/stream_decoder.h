#ifndef RINGMOE_ENGINE_TOKENIZER_STREAM_DECODER_H_
#define RINGMOE_ENGINE_TOKENIZER_STREAM_DECODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace ringmoe::tokenizer {

// Turns generated ids into text as they arrive. The concatenation of every
// Push and the final Flush equals Tokenizer::Decode of all the ids, with one
// exception: Decode turns a byte-fallback run of <0xNN> tokens that is not
// valid UTF-8 into one U+FFFD per byte, but complete characters at the start
// of such a run have already been returned as text by the time it turns
// invalid.
//
// Each Push decodes only the ids since the last text it returned (plus the
// ids of that text, for context), so the cost per id does not grow with the
// length of the sequence. Not thread-safe; use one per sequence. The
// tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer,
                         bool skip_special_tokens = false);

  // The text that `id` completes: never part of a UTF-8 character, and
  // nothing while the text ends in an incomplete character (held back until
  // later ids complete it or Flush).
  std::string Push(int32_t id);

  // Whatever is held back, then starts over as for a new sequence.
  std::string Flush();

 private:
  // Decodes ids_[0, end).
  std::string DecodeRange(size_t end) const;
  // Makes ids_[read_, new_read) the context.
  void Advance(size_t new_read);
  std::string Emit(bool flush);

  const Tokenizer& tokenizer_;
  const bool skip_special_tokens_;
  // ids_[0, read_) are the ids of the text returned last. They are decoded
  // again as context, so that decoders that look at neighbours
  // (SentencePiece's leading-space strip) treat the new ids as a full decode
  // does. ids_[read_, end) are the ids whose text is still held back.
  std::vector<int32_t> ids_;
  size_t read_ = 0;
};

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_STREAM_DECODER_H_
