#include "engine/checkpoint/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace ringmoe::checkpoint {
namespace {

using json::Json;

constexpr char kIndexName[] = "model.safetensors.index.json";
constexpr char kSingleName[] = "model.safetensors";
// Index files list every tensor once: tens of MB for the largest models.
constexpr uint64_t kMaxIndexBytes = 256ull << 20;
// {"metadata": {...}, "weight_map": {...}}; metadata's contents are not
// ours to constrain, but unbounded nesting is never legitimate.
constexpr int kIndexMaxDepth = 16;

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (absl::EndsWith(dir, "/")) return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The *.safetensors regular files directly in `dir`, sorted.
absl::StatusOr<std::vector<std::string>> ListSafetensors(
    const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return ErrnoError(
        errno, absl::StrCat("checkpoint ", dir, ": cannot open directory"));
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (absl::EndsWith(name, ".safetensors") &&
        IsRegularFile(JoinPath(dir, name))) {
      names.push_back(name);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Shards must sit beside the index: a path could point anywhere on the disk.
bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         !absl::StrContains(name, '/') && !absl::StrContains(name, '\0');
}

// tensor -> shard file name, from the index's weight_map.
absl::StatusOr<std::map<std::string, std::string>> ReadIndex(
    const std::string& index_path) {
  ASSIGN_OR_RETURN(const std::string text,
                   ReadFileToString(index_path, kMaxIndexBytes));
  absl::StatusOr<Json> json = json::ParseStrict(text, kIndexMaxDepth);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": ", json.status().message()));
  }
  if (!json->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": not a JSON object"));
  }
  const auto map_it = json->find("weight_map");
  if (map_it == json->end() || !map_it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": no \"weight_map\" object"));
  }
  if (map_it->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": \"weight_map\" is empty"));
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string() ||
        !IsPlainFileName(shard.get_ref<const std::string&>())) {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": tensor \"", tensor,
          "\" is not mapped to a shard file name in this directory"));
    }
    weight_map.emplace(tensor, shard.get_ref<const std::string&>());
  }
  return weight_map;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(
    const std::string& model_dir) {
  struct stat st;
  if (::stat(model_dir.c_str(), &st) != 0) {
    return ErrnoError(errno, absl::StrCat("checkpoint ", model_dir));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", model_dir, ": not a directory"));
  }
  auto checkpoint = absl::WrapUnique(new Checkpoint());
  checkpoint->dir_ = model_dir;

  const std::string index_path = JoinPath(model_dir, kIndexName);
  if (IsRegularFile(index_path)) {
    ASSIGN_OR_RETURN(const auto weight_map, ReadIndex(index_path));
    std::map<std::string, std::vector<std::string>> by_shard;
    for (const auto& [tensor, shard] : weight_map) {
      by_shard[shard].push_back(tensor);
    }
    for (const auto& [shard, tensors] : by_shard) {
      const std::string shard_path = JoinPath(model_dir, shard);
      absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
          SafetensorsFile::Open(shard_path);
      if (!file.ok()) {
        return absl::Status(
            file.status().code(),
            absl::StrCat(
                index_path, " assigns tensor \"", tensors.front(), "\"",
                tensors.size() > 1
                    ? absl::StrCat(" and ", tensors.size() - 1, " others")
                    : "",
                " to shard \"", shard,
                "\", which cannot be read: ", file.status().message()));
      }
      for (const std::string& tensor : tensors) {
        if ((*file)->Find(tensor) == nullptr) {
          return absl::NotFoundError(absl::StrCat(
              index_path, " assigns tensor \"", tensor, "\" to shard \"", shard,
              "\", but ", shard_path, " does not hold it"));
        }
      }
      for (const TensorView& view : (*file)->tensors()) {
        const auto it = weight_map.find(view.name);
        if (it == weight_map.end() || it->second != shard) {
          return absl::InvalidArgumentError(absl::StrCat(
              shard_path, " holds tensor \"", view.name, "\", which ",
              index_path,
              it == weight_map.end()
                  ? " does not list"
                  : absl::StrCat(" assigns to shard \"", it->second, "\"")));
        }
      }
      checkpoint->files_.push_back(*std::move(file));
    }
  } else {
    std::string path = JoinPath(model_dir, kSingleName);
    if (!IsRegularFile(path)) {
      ASSIGN_OR_RETURN(const std::vector<std::string> names,
                       ListSafetensors(model_dir));
      if (names.empty()) {
        return absl::NotFoundError(
            absl::StrCat("checkpoint ", model_dir, ": no ", kIndexName, ", ",
                         kSingleName, " or other *.safetensors file"));
      }
      if (names.size() > 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint ", model_dir, ": no ", kIndexName, " or ", kSingleName,
            ", and several *.safetensors files (", absl::StrJoin(names, ", "),
            "): which hold the weights?"));
      }
      path = JoinPath(model_dir, names.front());
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                     SafetensorsFile::Open(path));
    checkpoint->files_.push_back(std::move(file));
  }

  for (int f = 0; f < static_cast<int>(checkpoint->files_.size()); ++f) {
    for (const TensorView& view : checkpoint->files_[f]->tensors()) {
      // Shards are checked against the index, so a repeat means two shards
      // hold the same name; a single file cannot repeat one.
      if (!checkpoint->by_name_.emplace(view.name, &view).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint ", model_dir, ": tensor \"", view.name,
                         "\" is held by more than one file"));
      }
      checkpoint->total_bytes_ += view.num_bytes;
      // An empty tensor may share its address with the next one's data.
      if (view.num_bytes > 0) {
        checkpoint->by_address_.push_back(
            {reinterpret_cast<uintptr_t>(view.data), &view, f});
      }
    }
  }
  std::sort(checkpoint->by_address_.begin(), checkpoint->by_address_.end(),
            [](const MappedTensor& a, const MappedTensor& b) {
              return a.begin < b.begin;
            });
  return checkpoint;
}

const TensorView* Checkpoint::Find(absl::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<const TensorView*> Checkpoint::Get(
    absl::string_view name) const {
  const TensorView* view = Find(name);
  if (view == nullptr) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir_,
                                            ": no tensor \"", name, "\" (",
                                            by_name_.size(), " tensors)"));
  }
  return view;
}

std::optional<Checkpoint::FileLocation> Checkpoint::Locate(
    const void* data, uint64_t num_bytes) const {
  if (num_bytes == 0) return std::nullopt;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  // The last tensor starting at or before `data` is the only one that can
  // hold it: tensors do not overlap.
  auto it = std::upper_bound(by_address_.begin(), by_address_.end(), begin,
                             [](uintptr_t address, const MappedTensor& t) {
                               return address < t.begin;
                             });
  if (it == by_address_.begin()) return std::nullopt;
  --it;
  const uint64_t skip = begin - it->begin;
  if (skip >= it->view->num_bytes || num_bytes > it->view->num_bytes - skip) {
    return std::nullopt;
  }
  return FileLocation{it->file, it->view->file_offset + skip};
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, view] : by_name_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ringmoe::checkpoint
