#include "engine/moe/expert_placement.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace ringmoe::moe {
namespace {

constexpr absl::string_view kFileMagic = "ringmoe-expert-placement";
constexpr int kFileVersion = 1;
// A placement of a million experts over a thousand ranks is far below this.
constexpr uint64_t kMaxFileBytes = uint64_t{256} << 20;

bool Holds(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

// Whether expert a's tokens per replica exceed expert b's, exactly.
bool HeavierPerReplica(uint64_t tokens_a, int replicas_a, uint64_t tokens_b,
                       int replicas_b) {
  return static_cast<unsigned __int128>(tokens_a) * replicas_b >
         static_cast<unsigned __int128>(tokens_b) * replicas_a;
}

// Replica counts per expert: one each, then each extra one to the expert
// with the most tokens per replica (ties: lower id) below `max_replicas`.
std::vector<int> ReplicaCounts(absl::Span<const uint64_t> tokens,
                               int max_replicas, int extra_replicas) {
  std::vector<int> count(tokens.size(), 1);
  // The queue's top is the expert that gets the next replica.
  const auto after = [&](int a, int b) {
    if (HeavierPerReplica(tokens[a], count[a], tokens[b], count[b])) {
      return false;
    }
    if (HeavierPerReplica(tokens[b], count[b], tokens[a], count[a])) {
      return true;
    }
    return a > b;
  };
  std::priority_queue<int, std::vector<int>, decltype(after)> next(after);
  if (max_replicas > 1) {
    for (int e = 0; e < static_cast<int>(tokens.size()); ++e) next.push(e);
  }
  for (int i = 0; i < extra_replicas; ++i) {
    const int e = next.top();
    next.pop();
    ++count[e];
    if (count[e] < max_replicas) next.push(e);
  }
  return count;
}

// The greedy packing's state: which ranks hold each expert, which experts
// each rank holds, and each rank's load.
struct Packing {
  std::vector<double> weight;           // [expert] tokens per replica
  std::vector<int> capacity;            // [rank] replica slots
  std::vector<std::vector<int>> ranks;  // [expert]
  std::vector<std::vector<int>> held;   // [rank] experts
  std::vector<double> load;             // [rank]

  bool Free(int rank) const {
    return static_cast<int>(held[rank].size()) < capacity[rank];
  }
  void Put(int expert, int rank) {
    ranks[expert].push_back(rank);
    held[rank].push_back(expert);
    load[rank] += weight[expert];
  }
  void Remove(int expert, int rank) {
    ranks[expert].erase(
        std::find(ranks[expert].begin(), ranks[expert].end(), rank));
    held[rank].erase(std::find(held[rank].begin(), held[rank].end(), expert));
    load[rank] -= weight[expert];
  }

  // Every rank with a free slot holds `expert` already. A full rank b that
  // does not exists (the expert has more replicas to place than ranks it is
  // on, and at most one per rank), and it holds some expert f that a
  // free-slot rank a lacks (a holds `expert` and at most capacity[a] - 1 <=
  // capacity[b] experts in all). Moves f from b to a, the choice leaving
  // max(load[a], load[b]) smallest (ties: lower a, b, f), and returns b.
  absl::StatusOr<int> MakeRoom(int expert) {
    const int num_ranks = static_cast<int>(held.size());
    std::tuple<double, int, int, int> best(0, -1, -1, -1);
    for (int a = 0; a < num_ranks; ++a) {
      if (!Free(a)) continue;
      for (int b = 0; b < num_ranks; ++b) {
        if (Holds(ranks[expert], b)) continue;
        for (int f : held[b]) {
          if (Holds(ranks[f], a)) continue;
          const std::tuple<double, int, int, int> move(
              std::max(load[a] + weight[f],
                       load[b] - weight[f] + weight[expert]),
              a, b, f);
          if (std::get<1>(best) < 0 || move < best) best = move;
        }
      }
    }
    const auto [unused_load, a, b, f] = best;
    if (a < 0) {
      return absl::InternalError(absl::StrCat(
          "balanced expert placement: no rank can take a replica of expert ",
          expert));
    }
    Remove(f, b);
    Put(f, a);
    return b;
  }
};

}  // namespace

ExpertPlacement::ExpertPlacement(std::vector<std::vector<int>> replicas,
                                 int num_ranks,
                                 std::vector<uint64_t> balanced_for)
    : replicas_(std::move(replicas)),
      num_ranks_(num_ranks),
      num_replicas_(0),
      balanced_for_(std::move(balanced_for)) {
  for (const std::vector<int>& ranks : replicas_) {
    num_replicas_ += static_cast<int>(ranks.size());
  }
}

ExpertPlacement ExpertPlacement::Contiguous(int num_experts, int num_ranks) {
  std::vector<std::vector<int>> replicas(num_experts);
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t begin = int64_t{r} * num_experts / num_ranks;
    const int64_t end = int64_t{r + 1} * num_experts / num_ranks;
    for (int64_t e = begin; e < end; ++e) replicas[e] = {r};
  }
  return ExpertPlacement(std::move(replicas), num_ranks, {});
}

absl::StatusOr<ExpertPlacement> ExpertPlacement::Balanced(
    absl::Span<const uint64_t> tokens_per_expert, int num_ranks,
    int extra_replicas) {
  const int64_t num_experts = static_cast<int64_t>(tokens_per_expert.size());
  if (num_experts < 1) {
    return absl::InvalidArgumentError(
        "balanced expert placement: no experts (token counts are empty)");
  }
  if (num_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("balanced expert placement: num_ranks is ", num_ranks,
                     "; it must be at least 1"));
  }
  if (extra_replicas < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("balanced expert placement: extra_replicas is ",
                     extra_replicas, "; it must be at least 0"));
  }
  if (extra_replicas > num_experts * (num_ranks - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "balanced expert placement: ", extra_replicas, " extra replicas of ",
        num_experts, " experts over ", num_ranks,
        " ranks is more than one replica of every expert on every rank "
        "allows (at most ",
        num_experts * (num_ranks - 1), " extra)"));
  }
  const std::vector<int> count =
      ReplicaCounts(tokens_per_expert, num_ranks, extra_replicas);

  // Every replica, heaviest first (ties: lower expert id).
  std::vector<int> order;
  order.reserve(num_experts + extra_replicas);
  for (int e = 0; e < num_experts; ++e) order.insert(order.end(), count[e], e);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return HeavierPerReplica(tokens_per_expert[a], count[a],
                             tokens_per_expert[b], count[b]);
  });

  Packing packing;
  const int total = static_cast<int>(order.size());
  for (int e = 0; e < num_experts; ++e) {
    packing.weight.push_back(static_cast<double>(tokens_per_expert[e]) /
                             count[e]);
  }
  for (int r = 0; r < num_ranks; ++r) {
    packing.capacity.push_back(total / num_ranks +
                               (r < total % num_ranks ? 1 : 0));
  }
  packing.ranks.resize(num_experts);
  packing.held.resize(num_ranks);
  packing.load.assign(num_ranks, 0.0);
  for (int e : order) {
    int best = -1;
    for (int r = 0; r < num_ranks; ++r) {
      if (!packing.Free(r) || Holds(packing.ranks[e], r)) continue;
      if (best < 0 || packing.load[r] < packing.load[best]) best = r;
    }
    if (best < 0) {
      ASSIGN_OR_RETURN(best, packing.MakeRoom(e));
    }
    packing.Put(e, best);
  }
  for (std::vector<int>& ranks : packing.ranks) {
    std::sort(ranks.begin(), ranks.end());
  }
  return ExpertPlacement(std::move(packing.ranks), num_ranks,
                         std::vector<uint64_t>(tokens_per_expert.begin(),
                                               tokens_per_expert.end()));
}

std::vector<int32_t> ExpertPlacement::experts_of(int rank) const {
  std::vector<int32_t> experts;
  for (int e = 0; e < num_experts(); ++e) {
    if (holds(e, rank)) experts.push_back(e);
  }
  return experts;
}

bool ExpertPlacement::holds(int expert, int rank) const {
  return Holds(replicas_[expert], rank);
}

std::vector<int> ExpertPlacement::AssignExperts(
    absl::Span<const uint64_t> rows_per_expert) const {
  std::vector<int> rank_of(num_experts());
  std::vector<uint64_t> load(num_ranks_, 0);
  std::vector<int> replicated;
  for (int e = 0; e < num_experts(); ++e) {
    rank_of[e] = owner(e);
    if (replicas_[e].size() == 1) {
      load[owner(e)] += rows_per_expert[e];
    } else if (rows_per_expert[e] > 0) {
      replicated.push_back(e);
    }
  }
  std::stable_sort(replicated.begin(), replicated.end(), [&](int a, int b) {
    return rows_per_expert[a] > rows_per_expert[b];
  });
  for (int e : replicated) {
    // Ranks ascend, so the first minimum is the lowest rank.
    int best = replicas_[e].front();
    for (int r : replicas_[e]) {
      if (load[r] < load[best]) best = r;
    }
    rank_of[e] = best;
    load[best] += rows_per_expert[e];
  }
  return rank_of;
}

std::vector<double> ExpertPlacement::RankLoads(
    absl::Span<const uint64_t> tokens_per_expert) const {
  std::vector<double> load(num_ranks_, 0.0);
  for (int e = 0; e < num_experts(); ++e) {
    const double share = static_cast<double>(tokens_per_expert[e]) /
                         static_cast<double>(replicas_[e].size());
    for (int r : replicas_[e]) load[r] += share;
  }
  return load;
}

std::string ExpertPlacement::Summary() const {
  std::string out =
      absl::StrCat("expert placement: ", num_experts(), " experts over ",
                   num_ranks_, " ranks, ", num_replicas_, " replicas");
  std::vector<std::string> replicated;
  for (int e = 0; e < num_experts(); ++e) {
    if (replicas_[e].size() > 1) {
      replicated.push_back(absl::StrCat(e, " x", replicas_[e].size()));
    }
  }
  if (!replicated.empty()) {
    absl::StrAppend(&out, " (replicated: ", absl::StrJoin(replicated, ", "),
                    ")");
  }
  std::vector<int> slots(num_ranks_, 0);
  for (const std::vector<int>& ranks : replicas_) {
    for (int r : ranks) ++slots[r];
  }
  absl::StrAppend(&out, "; replicas per rank ", absl::StrJoin(slots, " "));
  uint64_t total = 0;
  for (uint64_t t : balanced_for_) total += t;
  if (total > 0) {
    const std::vector<double> load = RankLoads(balanced_for_);
    const double mean = static_cast<double>(total) / num_ranks_;
    std::vector<std::string> shares;
    for (double l : load) {
      shares.push_back(absl::StrFormat("%.1f%%", 100.0 * l / total));
    }
    absl::StrAppendFormat(&out, "; token share per rank %s (max/mean %.3f)",
                          absl::StrJoin(shares, " "),
                          *std::max_element(load.begin(), load.end()) / mean);
  }
  return out;
}

absl::Status ExpertPlacement::WriteFile(const std::string& path) const {
  std::string text =
      absl::StrCat(kFileMagic, " ", kFileVersion, "\n# ", Summary(),
                   "\n# <expert>: <ranks holding it>\n", "experts ",
                   num_experts(), "\nranks ", num_ranks_, "\n");
  for (int e = 0; e < num_experts(); ++e) {
    absl::StrAppend(&text, e, ": ", absl::StrJoin(replicas_[e], " "), "\n");
  }
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return ErrnoError(errno, absl::StrCat(temp, ": cannot create"));
  }
  absl::Status status;
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      status = ErrnoError(errno, absl::StrCat(temp, ": write failed"));
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = ErrnoError(errno, absl::StrCat(temp, ": fsync failed"));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = ErrnoError(errno, absl::StrCat(temp, ": close failed"));
  }
  if (status.ok() && std::rename(temp.c_str(), path.c_str()) != 0) {
    status =
        ErrnoError(errno, absl::StrCat("cannot rename ", temp, " to ", path));
  }
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

absl::StatusOr<ExpertPlacement> ExpertPlacement::ReadFile(
    const std::string& path, int num_experts, int num_ranks) {
  if (num_experts < 1 || num_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading placement file ", path,
                     ": a job needs at least one expert "
                     "and one rank, not ",
                     num_experts, " experts over ", num_ranks, " ranks"));
  }
  ASSIGN_OR_RETURN(const std::string text,
                   ReadFileToString(path, kMaxFileBytes));
  int line_number = 0;
  const auto error = [&](absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line_number, ": ", problem));
  };
  // What comes next: the header, the counts, then expert lines.
  enum { kHeader, kExperts, kRanks, kExpertLines } next = kHeader;
  int file_experts = 0;
  std::vector<std::vector<int>> replicas(num_experts);
  std::vector<int> listed_on(num_experts, 0);  // [expert] line, 0: not yet
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    int value = 0;
    const bool keyword_and_number =
        words.size() == 2 && absl::SimpleAtoi(words[1], &value);
    switch (next) {
      case kHeader:
        if (!keyword_and_number || words[0] != kFileMagic) {
          return error(absl::StrCat("not an expert placement file: expected '",
                                    kFileMagic, " ", kFileVersion, "', got '",
                                    line, "'"));
        }
        if (value != kFileVersion) {
          return error(absl::StrCat("placement file version ", value,
                                    " is not supported (this build reads ",
                                    "version ", kFileVersion, ")"));
        }
        next = kExperts;
        break;
      case kExperts:
        if (!keyword_and_number || words[0] != "experts" || value < 1) {
          return error(
              absl::StrCat("expected 'experts <count>', got '", line, "'"));
        }
        file_experts = value;
        next = kRanks;
        break;
      case kRanks:
        if (!keyword_and_number || words[0] != "ranks" || value < 1) {
          return error(
              absl::StrCat("expected 'ranks <count>', got '", line, "'"));
        }
        if (file_experts != num_experts || value != num_ranks) {
          return error(absl::StrCat(
              "placement file ", path, " was written for ", file_experts,
              " experts over ", value, " ranks; this job has ", num_experts,
              " experts over ", num_ranks, " ranks"));
        }
        next = kExpertLines;
        break;
      case kExpertLines: {
        const size_t colon = line.find(':');
        int expert = 0;
        if (colon == absl::string_view::npos ||
            !absl::SimpleAtoi(line.substr(0, colon), &expert)) {
          return error(absl::StrCat("expected '<expert>: <rank> ...', got '",
                                    line, "'"));
        }
        if (expert < 0 || expert >= num_experts) {
          return error(absl::StrCat("expert ", expert, " is out of range [0, ",
                                    num_experts, ")"));
        }
        if (listed_on[expert] != 0) {
          return error(absl::StrCat("expert ", expert,
                                    " is listed twice (first on line ",
                                    listed_on[expert], ")"));
        }
        listed_on[expert] = line_number;
        std::vector<int>& ranks = replicas[expert];
        for (absl::string_view word :
             absl::StrSplit(line.substr(colon + 1), absl::ByAnyChar(" \t\r"),
                            absl::SkipEmpty())) {
          int rank = 0;
          if (!absl::SimpleAtoi(word, &rank)) {
            return error(absl::StrCat("'", word, "' is not a rank (expert ",
                                      expert, ")"));
          }
          if (rank < 0 || rank >= num_ranks) {
            return error(absl::StrCat("rank ", rank, " of expert ", expert,
                                      " is out of range [0, ", num_ranks, ")"));
          }
          if (Holds(ranks, rank)) {
            return error(absl::StrCat("rank ", rank,
                                      " is listed twice for "
                                      "expert ",
                                      expert));
          }
          ranks.push_back(rank);
        }
        if (ranks.empty()) {
          return error(absl::StrCat("expert ", expert, " has no rank"));
        }
        std::sort(ranks.begin(), ranks.end());
        break;
      }
    }
  }
  if (next != kExpertLines) {
    static constexpr const char* kMissing[] = {
        "the header", "'experts <count>'", "'ranks <count>'"};
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ends before ", kMissing[next]));
  }
  const auto missing = std::find(listed_on.begin(), listed_on.end(), 0);
  if (missing != listed_on.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expert ", missing - listed_on.begin(), " is missing (",
        num_experts - std::count(listed_on.begin(), listed_on.end(), 0), " of ",
        num_experts, " experts listed)"));
  }
  return ExpertPlacement(std::move(replicas), num_ranks, {});
}

}  // namespace ringmoe::moe
