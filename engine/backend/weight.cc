#include "engine/backend/weight.h"

namespace ringmoe::backend {

int64_t DataBytes(const Weight& w) {
  return kernels::QuantizedDataBytes(w.type, w.rows, w.cols, w.group_size);
}

int64_t GroupScaleBytes(const Weight& w) {
  return kernels::QuantizedScaleCount(w.type, w.rows, w.cols, w.group_size) *
         static_cast<int64_t>(sizeof(uint16_t));
}

int64_t BlockScaleBytes(const Weight& w) {
  return kernels::BlockScaleCount(w.type, w.rows, w.cols, w.block_rows,
                                  w.block_cols) *
         static_cast<int64_t>(sizeof(float));
}

int64_t ExponentBytes(const Weight& w) {
  return kernels::BlockExponentCount(w.type, w.rows, w.cols);
}

int64_t StoredBytes(const Weight& w) {
  return DataBytes(w) + GroupScaleBytes(w) + BlockScaleBytes(w) +
         ExponentBytes(w);
}

}  // namespace ringmoe::backend
