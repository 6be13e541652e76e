#include "engine/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/cpu/numeric.h"
#include "nlohmann/json.hpp"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader assumes a matching host"
#endif

namespace ringmoe::checkpoint {
namespace {

using json::Json;

constexpr absl::string_view kMetadataKey = "__metadata__";
// Top-level object > tensor object > shape array: nothing legal goes deeper.
constexpr int kHeaderMaxDepth = 3;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The byte count of a dtype/shape pair, or an error saying why there is none.
// Nonzero dimensions must multiply within int64 even when another dimension
// is zero, so later code can take partial products without overflow.
absl::StatusOr<uint64_t> ByteCount(DType dtype,
                                   const std::vector<int64_t>& shape) {
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeString(shape)));
    }
    if (dim == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero_product, static_cast<uint64_t>(dim),
                               &nonzero_product) ||
        nonzero_product >
            static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "element count of shape ", ShapeString(shape), " overflows"));
    }
  }
  if (has_zero) return 0;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(nonzero_product, DTypeSize(dtype), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size of ", DTypeName(dtype), " ", ShapeString(shape),
                     " overflows"));
  }
  return bytes;
}

// Reads a JSON non-negative integer that must fit in `max`.
absl::StatusOr<uint64_t> ReadUnsigned(const Json& value, uint64_t max) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > max) {
      return absl::InvalidArgumentError(absl::StrCat(v, " is too large"));
    }
    return v;
  }
  if (value.is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(value.get<int64_t>(), " is negative"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(value.is_number_float() ? value.dump() : value.type_name(),
                   " is not a non-negative integer"));
}

// Validates one tensor's entry; errors say what is wrong without the prefix.
absl::StatusOr<TensorEntry> ParseEntry(const std::string& name,
                                       const Json& value, uint64_t data_size) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("entry is a JSON ", value.type_name(), ", not an object"));
  }
  TensorEntry entry;
  entry.name = name;

  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end()) {
    return absl::InvalidArgumentError("missing \"dtype\"");
  }
  if (!dtype_it->is_string()) {
    return absl::InvalidArgumentError("\"dtype\" is not a string");
  }
  ASSIGN_OR_RETURN(entry.dtype,
                   ParseDType(dtype_it->get_ref<const std::string&>()));

  const auto shape_it = value.find("shape");
  if (shape_it == value.end()) {
    return absl::InvalidArgumentError("missing \"shape\"");
  }
  if (!shape_it->is_array()) {
    return absl::InvalidArgumentError("\"shape\" is not an array");
  }
  for (const Json& dim : *shape_it) {
    absl::StatusOr<uint64_t> d =
        ReadUnsigned(dim, std::numeric_limits<int64_t>::max());
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", d.status().message()));
    }
    entry.shape.push_back(static_cast<int64_t>(*d));
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end()) {
    return absl::InvalidArgumentError("missing \"data_offsets\"");
  }
  if (!offsets_it->is_array() || offsets_it->size() != 2) {
    return absl::InvalidArgumentError(
        "\"data_offsets\" is not an array of two offsets");
  }
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<uint64_t> off =
        ReadUnsigned((*offsets_it)[i], std::numeric_limits<uint64_t>::max());
    if (!off.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data offset ", off.status().message()));
    }
    (i == 0 ? entry.begin : entry.end) = *off;
  }
  if (entry.begin > entry.end) {
    return absl::InvalidArgumentError(absl::StrCat("data_offsets [",
                                                   entry.begin, ", ", entry.end,
                                                   "] end before they begin"));
  }
  if (entry.end > data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_offsets [", entry.begin, ", ", entry.end,
        "] run past the end of the data section (", data_size, " bytes)"));
  }

  ASSIGN_OR_RETURN(const uint64_t bytes, ByteCount(entry.dtype, entry.shape));
  if (bytes != entry.end - entry.begin) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(entry.dtype), " ", ShapeString(entry.shape),
                     " needs ", bytes, " bytes but data_offsets [", entry.begin,
                     ", ", entry.end, "] hold ", entry.end - entry.begin));
  }
  return entry;
}

absl::Status ParseMetadata(const Json& value, absl::string_view file,
                           std::map<std::string, std::string>* metadata) {
  if (value.is_null()) return absl::OkStatus();
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": header: \"__metadata__\" is not an object"));
  }
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": header: \"__metadata__\" value for \"", key,
                       "\" is not a string"));
    }
    if (metadata != nullptr) {
      (*metadata)[key] = v.get_ref<const std::string&>();
    }
  }
  return absl::OkStatus();
}

// Little-endian loads from unaligned bytes.
template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

absl::Status WrongDType(const TensorView& t, absl::string_view wanted) {
  return absl::InvalidArgumentError(
      absl::StrCat(t.file_path, ": tensor \"", t.name, "\" is ",
                   DTypeName(t.dtype), ", not ", wanted));
}

// The 8-byte length prefix and the padded JSON header for `tensors`.
absl::StatusOr<std::string> BuildHeader(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) {
      if (!tokenizer::IsValidUtf8(key) || !tokenizer::IsValidUtf8(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("metadata entry \"", key, "\" is not valid UTF-8"));
      }
      meta[key] = value;
    }
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  absl::flat_hash_set<absl::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const auto error = [&t](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", t.name, "\": ", what));
    };
    if (t.name == kMetadataKey) return error("name is reserved");
    if (!tokenizer::IsValidUtf8(t.name))
      return error("name is not valid UTF-8");
    if (!names.insert(t.name).second) return error("duplicate name");
    absl::StatusOr<uint64_t> bytes = ByteCount(t.dtype, t.shape);
    if (!bytes.ok()) return error(bytes.status().message());
    if (*bytes != t.bytes.size()) {
      return error(absl::StrCat(DTypeName(t.dtype), " ", ShapeString(t.shape),
                                " needs ", *bytes, " bytes but ",
                                t.bytes.size(), " were given"));
    }
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string json = header.dump();
  json.resize((json.size() + 7) / 8 * 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, sizeof(n));
  out += json;
  return out;
}

absl::Status WriteAll(int fd, absl::string_view bytes, absl::string_view path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat(path, ": write failed"));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorEntry>> ParseSafetensorsHeader(
    absl::string_view header_json, uint64_t data_size,
    absl::string_view file_for_errors,
    std::map<std::string, std::string>* metadata) {
  const absl::string_view file = file_for_errors;
  if (header_json.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": header of ", header_json.size(),
                     " bytes exceeds the limit of ", kMaxHeaderBytes));
  }
  absl::StatusOr<Json> json = json::ParseStrict(header_json, kHeaderMaxDepth);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": header: ", json.status().message()));
  }
  if (!json->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": header is a JSON ", json->type_name(), ", not an object"));
  }

  std::vector<TensorEntry> entries;
  entries.reserve(json->size());
  for (const auto& [name, value] : json->items()) {
    if (name == kMetadataKey) {
      RETURN_IF_ERROR(ParseMetadata(value, file, metadata));
      continue;
    }
    absl::StatusOr<TensorEntry> entry = ParseEntry(name, value, data_size);
    if (!entry.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": tensor \"", name, "\": ", entry.status().message()));
    }
    entries.push_back(*std::move(entry));
  }

  std::sort(entries.begin(), entries.end(),
            [](const TensorEntry& a, const TensorEntry& b) {
              return std::tie(a.begin, a.end, a.name) <
                     std::tie(b.begin, b.end, b.name);
            });
  // Empty tensors own no bytes, so they cannot overlap anything.
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (previous != nullptr && previous->end > entry.begin) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": tensors \"", previous->name, "\" [", previous->begin, ", ",
          previous->end, ") and \"", entry.name, "\" [", entry.begin, ", ",
          entry.end, ") overlap"));
    }
    previous = &entry;
  }
  return entries;
}

absl::StatusOr<SafetensorsLayout> ParseSafetensorsBuffer(
    absl::string_view whole_file, absl::string_view file_for_errors) {
  const absl::string_view file = file_for_errors;
  if (whole_file.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": file is ", whole_file.size(),
                     " bytes, too short for the 8-byte header length"));
  }
  const uint64_t header_size =
      Load<uint64_t>(reinterpret_cast<const uint8_t*>(whole_file.data()));
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": header length ", header_size,
                     " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }
  if (header_size > whole_file.size() - 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": header length ", header_size,
        " runs past the end of the file (", whole_file.size(), " bytes)"));
  }
  SafetensorsLayout layout;
  layout.data_offset = 8 + header_size;
  ASSIGN_OR_RETURN(layout.tensors, ParseSafetensorsHeader(
                                       whole_file.substr(8, header_size),
                                       whole_file.size() - layout.data_offset,
                                       file, &layout.metadata));
  return layout;
}

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat(path, ": cannot open"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, absl::StrCat(path, ": cannot stat"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    // Checked before mmap, which refuses zero-length mappings.
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": file is ", size,
                     " bytes, too short for the 8-byte header length"));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // The mapping keeps the file alive.
  if (mapping == MAP_FAILED) {
    return ErrnoError(mmap_errno, absl::StrCat(path, ": mmap failed"));
  }
#ifdef MADV_HUGEPAGE
  // Weights kept as stored are read from this mapping: a hint that the
  // page cache fill it with huge pages where the kernel can
  // (base/host_memory.h says why); refused or ignored, it changes nothing.
  ::madvise(mapping, size, MADV_HUGEPAGE);
#endif

  auto file = absl::WrapUnique(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->file_size_ = size;
  const auto* base = static_cast<const uint8_t*>(mapping);
  ASSIGN_OR_RETURN(
      SafetensorsLayout layout,
      ParseSafetensorsBuffer(
          absl::string_view(reinterpret_cast<const char*>(base), size), path));

  file->metadata_ = std::move(layout.metadata);
  file->tensors_.reserve(layout.tensors.size());
  for (TensorEntry& entry : layout.tensors) {
    TensorView view;
    view.name = std::move(entry.name);
    view.dtype = entry.dtype;
    view.shape = std::move(entry.shape);
    view.file_offset = layout.data_offset + entry.begin;
    view.data = base + view.file_offset;
    view.num_bytes = entry.end - entry.begin;
    view.file_path = path;
    file->index_.emplace(view.name, file->tensors_.size());
    file->tensors_.push_back(std::move(view));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, file_size_);
}

const TensorView* SafetensorsFile::Find(absl::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const TensorView*> SafetensorsFile::Get(
    absl::string_view name) const {
  const TensorView* view = Find(name);
  if (view == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor \"", name,
                                            "\" (the file holds ",
                                            tensors_.size(), " tensors)"));
  }
  return view;
}

absl::StatusOr<std::vector<float>> CopyAsFloat32(const TensorView& tensor) {
  const size_t n = tensor.num_bytes / DTypeSize(tensor.dtype);
  std::vector<float> out(n);
  const uint8_t* p = tensor.data;
  switch (tensor.dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out.data(), p, n * sizeof(float));
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        out[i] = kernels::Bf16ToF32(Load<uint16_t>(p + 2 * i));
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        out[i] = kernels::F16ToF32(Load<uint16_t>(p + 2 * i));
      }
      break;
    default:
      return WrongDType(tensor, "F32, F16 or BF16");
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> CopyAsInt64(const TensorView& tensor) {
  switch (tensor.dtype) {
    case DType::kU8:
    case DType::kI8:
    case DType::kU16:
    case DType::kI16:
    case DType::kU32:
    case DType::kI32:
    case DType::kU64:
    case DType::kI64:
      break;
    default:
      return WrongDType(tensor, "an integer dtype");
  }
  const size_t size = DTypeSize(tensor.dtype);
  const size_t n = tensor.num_bytes / size;
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = tensor.data + i * size;
    switch (tensor.dtype) {
      case DType::kU8:
        out[i] = Load<uint8_t>(p);
        break;
      case DType::kI8:
        out[i] = Load<int8_t>(p);
        break;
      case DType::kU16:
        out[i] = Load<uint16_t>(p);
        break;
      case DType::kI16:
        out[i] = Load<int16_t>(p);
        break;
      case DType::kU32:
        out[i] = Load<uint32_t>(p);
        break;
      case DType::kI32:
        out[i] = Load<int32_t>(p);
        break;
      case DType::kU64: {
        const uint64_t v = Load<uint64_t>(p);
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return absl::OutOfRangeError(
              absl::StrCat(tensor.file_path, ": tensor \"", tensor.name,
                           "\": element ", i, " (", v, ") exceeds int64"));
        }
        out[i] = static_cast<int64_t>(v);
        break;
      }
      default:
        out[i] = Load<int64_t>(p);
        break;
    }
  }
  return out;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string out, BuildHeader(tensors, metadata));
  for (const TensorToWrite& t : tensors)
    out.append(t.bytes.data(), t.bytes.size());
  return out;
}

absl::Status WriteSafetensors(
    const std::string& path, const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = BuildHeader(tensors, metadata);
  if (!header.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", header.status().message()));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, absl::StrCat(tmp, ": cannot create"));
  absl::Status status = WriteAll(fd, *header, tmp);
  for (size_t i = 0; status.ok() && i < tensors.size(); ++i) {
    status = WriteAll(fd, tensors[i].bytes, tmp);
  }
  if (::close(fd) != 0 && status.ok()) {
    status = ErrnoError(errno, absl::StrCat(tmp, ": close failed"));
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno, absl::StrCat(path, ": cannot rename ", tmp));
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace ringmoe::checkpoint
