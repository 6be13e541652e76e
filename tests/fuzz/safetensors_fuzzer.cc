// libFuzzer target: arbitrary bytes as a whole safetensors file, parsed from
// memory by the same code SafetensorsFile::Open runs on a mapped file.
//
// Beyond "no crash, no sanitizer report", every accepted file must satisfy
// the invariants readers rely on (checked independently of the parser), must
// survive a write/read round trip unchanged, and every rejection must name
// the file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "engine/checkpoint/dtype.h"
#include "engine/checkpoint/safetensors.h"

namespace {

using ::ringmoe::checkpoint::DTypeSize;
using ::ringmoe::checkpoint::ParseSafetensorsBuffer;
using ::ringmoe::checkpoint::SafetensorsLayout;
using ::ringmoe::checkpoint::SerializeSafetensors;
using ::ringmoe::checkpoint::TensorEntry;
using ::ringmoe::checkpoint::TensorToWrite;

constexpr char kFile[] = "fuzz.safetensors";

// Where the bytes of accepted tensors are summed, so the reads that let ASan
// check every accepted range are not optimised away.
volatile uint64_t g_sink = 0;

[[noreturn]] void Fail(const char* what, absl::string_view detail = "") {
  std::fprintf(stderr, "safetensors fuzzer: %s %.*s\n", what,
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void CheckInvariants(const SafetensorsLayout& layout, absl::string_view file) {
  if (layout.data_offset < 8 || layout.data_offset > file.size()) {
    Fail("data offset outside the file");
  }
  const uint64_t data_size = file.size() - layout.data_offset;
  const TensorEntry* previous = nullptr;
  uint64_t checksum = 0;
  for (const TensorEntry& t : layout.tensors) {
    if (t.begin > t.end || t.end > data_size)
      Fail("range outside data", t.name);
    unsigned __int128 bytes = DTypeSize(t.dtype);
    for (int64_t dim : t.shape) {
      if (dim < 0) Fail("negative dimension", t.name);
      bytes *= static_cast<uint64_t>(dim);
      if (bytes > file.size()) bytes = file.size() + 1;  // stays over
    }
    if (bytes != t.end - t.begin) Fail("byte count mismatch", t.name);
    if (previous != nullptr &&
        (previous->begin > t.begin ||
         (previous->begin == t.begin && previous->end > t.end))) {
      Fail("entries not ordered by offset", t.name);
    }
    if (t.begin != t.end) {
      if (previous != nullptr && previous->end > t.begin) {
        Fail("overlap accepted", t.name);
      }
      previous = &t;
    }
    // Reading every accepted byte lets ASan catch a range past the buffer.
    for (uint64_t i = layout.data_offset + t.begin;
         i < layout.data_offset + t.end; ++i) {
      checksum += static_cast<uint8_t>(file[i]);
    }
  }
  g_sink = checksum;
}

void CheckRoundTrip(const SafetensorsLayout& layout, absl::string_view file) {
  std::vector<TensorToWrite> tensors;
  for (const TensorEntry& t : layout.tensors) {
    tensors.push_back(
        {t.name, t.dtype, t.shape,
         file.substr(layout.data_offset + t.begin, t.end - t.begin)});
  }
  absl::StatusOr<std::string> image =
      SerializeSafetensors(tensors, layout.metadata);
  if (!image.ok())
    Fail("accepted file cannot be rewritten:", image.status().message());
  absl::StatusOr<SafetensorsLayout> again =
      ParseSafetensorsBuffer(*image, "rewritten");
  if (!again.ok()) Fail("rewritten file rejected:", again.status().message());
  if (again->metadata != layout.metadata) Fail("metadata changed");
  if (again->tensors.size() != tensors.size()) Fail("tensor count changed");
  // The rewrite packs tensors in the same (offset) order.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& t = again->tensors[i];
    if (t.name != tensors[i].name || t.dtype != tensors[i].dtype ||
        t.shape != tensors[i].shape ||
        image->substr(again->data_offset + t.begin, t.end - t.begin) !=
            tensors[i].bytes) {
      Fail("tensor changed in the round trip:", t.name);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<SafetensorsLayout> layout =
      ParseSafetensorsBuffer(file, kFile);
  if (!layout.ok()) {
    if (!absl::StartsWith(layout.status().message(), kFile)) {
      Fail("error does not name the file:", layout.status().message());
    }
    return 0;
  }
  CheckInvariants(*layout, file);
  CheckRoundTrip(*layout, file);
  return 0;
}
