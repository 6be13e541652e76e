#include "engine/backend/host_weight.h"

namespace ringmoe::backend {

kernels::Matrix AsMatrix(const Weight& w) {
  kernels::Matrix m;
  m.data = w.data;
  m.type = w.type;
  m.rows = w.rows;
  m.cols = w.cols;
  m.scales = w.scales;
  m.group_size = w.group_size;
  m.block_scales = w.block_scales;
  m.block_rows = w.block_rows;
  m.block_cols = w.block_cols;
  m.exponents = w.exponents;
  return m;
}

Weight AsWeight(const kernels::Matrix& m) {
  Weight w;
  w.data = m.data;
  w.type = m.type;
  w.rows = m.rows;
  w.cols = m.cols;
  w.scales = m.scales;
  w.group_size = m.group_size;
  w.block_scales = m.block_scales;
  w.block_rows = m.block_rows;
  w.block_cols = m.block_cols;
  w.exponents = m.exponents;
  w.memory = MemorySpace::kHost;
  return w;
}

}  // namespace ringmoe::backend
