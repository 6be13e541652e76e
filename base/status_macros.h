// Early-return helpers for absl::Status and absl::StatusOr (Abseil 20220623
// ships none).
#ifndef RINGMOE_BASE_STATUS_MACROS_H_
#define RINGMOE_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RINGMOE_STATUS_CONCAT_INNER(a, b) a##b
#define RINGMOE_STATUS_CONCAT(a, b) RINGMOE_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    const ::absl::Status ringmoe_status_ = (expr);     \
    if (!ringmoe_status_.ok()) return ringmoe_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr, or
// returns its status.
#define ASSIGN_OR_RETURN(lhs, expr)                                         \
  ASSIGN_OR_RETURN_IMPL(RINGMOE_STATUS_CONCAT(ringmoe_statusor_, __LINE__), \
                        lhs, expr)

#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                          \
  if (!statusor.ok()) return statusor.status();    \
  lhs = std::move(statusor).value()

#endif  // RINGMOE_BASE_STATUS_MACROS_H_
