// Reading and writing safetensors files
// (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON describing each tensor, then the data
// section that the tensors' offsets point into.
//
// Reading maps the file and hands out zero-copy views; nothing in a file is
// trusted: every offset, shape and dtype is checked before a view exists.
#ifndef RINGMOE_ENGINE_CHECKPOINT_SAFETENSORS_H_
#define RINGMOE_ENGINE_CHECKPOINT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/checkpoint/dtype.h"

namespace ringmoe::checkpoint {

// Headers larger than this are rejected before parsing.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// One tensor as described by a header. begin/end are byte offsets into the
// data section (which starts right after the header), end exclusive.
struct TensorEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Parses and validates a header's JSON against a data section of `data_size`
// bytes. Entries come back ordered by offset. `__metadata__` goes into
// `metadata` when given. Gaps between tensors are allowed (writers pad);
// overlaps, duplicates, unknown dtypes and size mismatches are not.
// `file_for_errors` prefixes every error message.
absl::StatusOr<std::vector<TensorEntry>> ParseSafetensorsHeader(
    absl::string_view header_json, uint64_t data_size,
    absl::string_view file_for_errors,
    std::map<std::string, std::string>* metadata = nullptr);

// A whole file's layout: its tensors, metadata, and where data begins.
struct SafetensorsLayout {
  std::vector<TensorEntry> tensors;  // ordered by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // absolute offset of the data section
};

// Parses a whole file held in memory: length prefix, header and data. This
// is what SafetensorsFile::Open runs on the mapped file (and what the fuzzer
// drives).
absl::StatusOr<SafetensorsLayout> ParseSafetensorsBuffer(
    absl::string_view whole_file, absl::string_view file_for_errors);

// A zero-copy view of one tensor's bytes. `data` lives as long as the file
// (or checkpoint) that handed it out and is NOT aligned for its dtype
// (copy or use memcpy-based loads).
struct TensorView {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t num_bytes = 0;
  std::string file_path;
  uint64_t file_offset = 0;  // absolute offset of `data` in `file_path`

  int64_t NumElements() const;
};

// One read-only memory-mapped safetensors file. Immutable once open, so it
// may be read from any number of threads. Pages load on first touch; a file
// truncated by someone else while mapped faults (SIGBUS) when read.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  // The whole file, mapped read-only (file_size() bytes).
  const void* mapping() const { return mapping_; }
  // Ordered by offset in the file.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }

  // nullptr when absent.
  const TensorView* Find(absl::string_view name) const;
  // NotFound naming the file and the tensor when absent.
  absl::StatusOr<const TensorView*> Get(absl::string_view name) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  void* mapping_ = nullptr;
  uint64_t file_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// Copies a floating-point tensor (F32, F16 or BF16; all exact) to float32.
absl::StatusOr<std::vector<float>> CopyAsFloat32(const TensorView& tensor);

// Copies an integer tensor (any signed or unsigned width; U64 values must fit)
// to int64.
absl::StatusOr<std::vector<int64_t>> CopyAsInt64(const TensorView& tensor);

// A tensor to write. `bytes` is not owned and must hold exactly
// product(shape) * DTypeSize(dtype) bytes, little-endian.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  absl::string_view bytes;
};

// The bytes of a safetensors file holding `tensors` in the given order (data
// packed back to back) and `metadata` as `__metadata__` when non-empty. The
// header is padded with spaces to a multiple of 8 bytes, as Hugging Face's
// writer does, so the data section starts 8-byte aligned.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Writes SerializeSafetensors' output to `path`, through a temporary file
// renamed into place so readers never see a partial file.
absl::Status WriteSafetensors(
    const std::string& path, const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace ringmoe::checkpoint

#endif  // RINGMOE_ENGINE_CHECKPOINT_SAFETENSORS_H_
