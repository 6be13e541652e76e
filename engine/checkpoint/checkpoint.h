// A Hugging Face checkpoint directory's weights, memory-mapped.
#ifndef RINGMOE_ENGINE_CHECKPOINT_CHECKPOINT_H_
#define RINGMOE_ENGINE_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/checkpoint/safetensors.h"

namespace ringmoe::checkpoint {

// Every tensor of a model, whichever shard holds it. Immutable once open, so
// it may be read from any number of threads.
class Checkpoint {
 public:
  // Opens `model_dir`, looking in this order for
  //  - model.safetensors.index.json: its weight_map (tensor -> shard file
  //    beside the index) must match the shards exactly: every shard exists
  //    and holds just the tensors the index assigns to it;
  //  - model.safetensors;
  //  - a single *.safetensors file (several without an index is an error).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(
      const std::string& model_dir);

  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }

  // nullptr when absent. The view lives as long as this checkpoint.
  const TensorView* Find(absl::string_view name) const;
  // NotFound naming the directory and the tensor when absent.
  absl::StatusOr<const TensorView*> Get(absl::string_view name) const;

  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;
  size_t num_tensors() const { return by_name_.size(); }
  // Sum of all tensors' bytes (headers and padding excluded).
  uint64_t total_bytes() const { return total_bytes_; }
  // The files read, in shard-name order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const {
    return files_;
  }

  // Where bytes of a tensor lie on disk.
  struct FileLocation {
    int file = 0;         // index into files()
    uint64_t offset = 0;  // absolute byte offset in that file
  };
  // The file and offset holding [data, data + num_bytes) when that range
  // lies entirely inside the data of one tensor of this checkpoint's
  // mappings (the whole tensor or any part of it); nullopt otherwise: an
  // empty range, a pointer outside every tensor (memory the caller owns, a
  // copy of checkpoint bytes), or a range running past its tensor's end,
  // even into an adjacent tensor. So a caller holding only a weight's
  // pointer (the memory ring) can read the same bytes from the file, in
  // place of the mapping.
  std::optional<FileLocation> Locate(const void* data,
                                     uint64_t num_bytes) const;

 private:
  // One tensor of a file, for Locate.
  struct MappedTensor {
    uintptr_t begin = 0;  // address of the tensor's data
    const TensorView* view = nullptr;
    int file = 0;
  };

  Checkpoint() = default;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, const TensorView*> by_name_;
  // Every tensor with data, sorted by address; they do not overlap.
  std::vector<MappedTensor> by_address_;
  uint64_t total_bytes_ = 0;
};

}  // namespace ringmoe::checkpoint

#endif  // RINGMOE_ENGINE_CHECKPOINT_CHECKPOINT_H_
