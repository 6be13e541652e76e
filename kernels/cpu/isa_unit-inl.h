// Helpers shared by the instruction-set units, compiled into each one's
// namespace: include this file inside `namespace ringmoe::kernels::<isa> {`
// after kernels/cpu/isa.h (it includes nothing itself and has no include
// guard, so each unit gets its own copy; see isa.h for why).

// Unrolls the loop that follows completely. Before GCC 12 decides which
// local arrays live in registers it has unrolled only innermost loops, so a
// tile's accumulators indexed by an outer loop's counter stayed an array in
// memory, stored on every step of the hot loop (three to twelve 32-byte
// stores per step); with every loop over them unrolled first, each index is
// a constant and the accumulators stay in registers. (The blocked
// products' OuterSums in avx2_blocked.cc avoid the same by keeping their
// accumulators in a function of their own.) Tiles whose accumulators
// outnumber the registers gain nothing and lost a little in measurement,
// so the macro marks only the loops it was measured to help.
#ifndef RINGMOE_UNROLL
#define RINGMOE_UNROLL _Pragma("GCC unroll 16")
#endif

template <typename T>
constexpr T Min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
constexpr T Max(T a, T b) {
  return a < b ? b : a;
}
template <typename T>
constexpr T Clamp(T v, T lo, T hi) {
  return Min(Max(v, lo), hi);
}

// ThreadScratch (scratch.h) as `count` elements of T.
template <typename T>
T* Scratch(ScratchSlot slot, int64_t count) {
  return static_cast<T*>(
      ThreadScratch(slot, count * static_cast<int64_t>(sizeof(T))));
}

// How many cache lines ahead of its loads a tile prefetches each of its
// weight rows where it reads a row's lines far apart in time (GroupTile's
// rows of 8, the AVX-512 mxfp4 tiles against several activation rows).
constexpr int kLongRowPrefetchLines = 32;

// One activation row against rows [rb, re): consecutive rows are adjacent
// in memory, so the range is one sequential stream. It is read as
// kStreamSegments streams at once (its thirds, a row of each at a time): a core
// keeps more of memory's latency covered across several streams than its
// prefetchers do in one (docs/PERFORMANCE.md, "Three streams per core"), and
// three rows' accumulators fit the 16 AVX2 registers. `group(r0, stride,
// std::integral_constant<int, S>())` computes rows r0 + s * stride, s < S, each
// exactly as it would alone: the grouping never moves a result.
constexpr int kStreamSegments = 3;
// A tile's kAhead when its rows are ForEachStreamGroup's streams.
constexpr int kRowsAreStreams = -1;
template <int kSegments = kStreamSegments, typename GroupFn>
void ForEachStreamGroup(int64_t rb, int64_t re, const GroupFn& group) {
  const int64_t per = (re - rb) / kSegments;
  for (int64_t t = 0; t < per; ++t)
    group(rb + t, per, std::integral_constant<int, kSegments>());
  for (int64_t r = rb + kSegments * per; r < re; ++r)
    group(r, int64_t{1}, std::integral_constant<int, 1>());
}

// Activations longer than this do not stay in L1 from one weight row of a
// stream to the next beside three streams' rows: each is read again from
// L2 for every few weight rows, and a core then keeps enough of memory's
// latency covered only across kLongRowStreams streams (with three, bf16
// rows of 4096-7168 columns drew 0.64-0.77 of the bandwidth probe in the
// VM's faster memory state, 2048 columns 0.96; docs/PERFORMANCE.md, "Six
// streams for long rows").
inline int64_t ShortActivationBytes() { return L1DataCacheBytes() / 4; }
constexpr int kLongRowStreams = 6;

// Few-row products over weight rows [rb, re) and activation rows [0, n):
// the activation rows in ceil(n / max_group) groups as even as can be (8
// rows in groups of at most 3: 3, 3 and 2; 4 rows: 2 and 2), since the
// tiles share each weight's widening across a group and are slowest for a
// row alone, each group over a block of `block_rows` weight rows before the
// next block: `fn(r0, r1, first, size)` computes weight rows [r0, r1)
// against activation rows [first, first + size). With groups that fit the
// L1 data cache together and blocks that stay in L2, each weight is read
// from memory once and each group's activations from L1. (mxfp4 against
// all activation rows at once per weight row: a row's activations were
// evicted before the next weight row needed them, a third slower.)
template <typename GroupFn>
void ForEachRowBlockAndGroup(int64_t rb, int64_t re, int64_t block_rows,
                             int64_t n, int64_t max_group, const GroupFn& fn) {
  const int64_t groups = (n + max_group - 1) / max_group;
  for (int64_t r0 = rb; r0 < re; r0 += block_rows) {
    const int64_t r1 = Min(re, r0 + block_rows);
    int64_t first = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t size = n / groups + (g < n % groups ? 1 : 0);
      fn(r0, r1, first, size);
      first += size;
    }
  }
}

// ForEachRowBlockAndGroup's block of weight rows of `row_bytes` each (with
// their scales): a quarter of L2, 4 to 64 rows.
inline int64_t L2BlockRows(int64_t row_bytes) {
  return Clamp<int64_t>(L2CacheBytes() / 4 / row_bytes, 4, 64);
}

// L2BlockRows of mxfp4 weight rows of `blocks` blocks (16 bytes and an
// exponent each).
inline int64_t Mxfp4BlockRows(int64_t blocks) {
  return L2BlockRows(blocks * 17);
}

// GetWeightPrefetch(type) == WeightPrefetch::kSoftware (cpu_features.h),
// inline here: an inline function of that header would be emitted into
// this unit outside its namespace (see isa.h).
inline bool SoftwarePrefetch(WeightType type) {
  return __atomic_load_n(&internal::weight_prefetch[static_cast<int>(type)],
                         __ATOMIC_RELAXED) ==
         static_cast<int>(WeightPrefetch::kSoftware);
}

// The single-stream kernels prefetch the line this many bytes ahead of each
// one they load (WeightPrefetcher::Stream). On the Zen 4 VM it was tuned on,
// the hardware prefetchers alone kept too few lines in flight: 15-20% below
// this at 1024x2048 and 14336x4096 bf16 in both of its memory states (4 KiB
// and 8 KiB were best; 8 KiB ahead in the faster state).
constexpr int64_t kStreamPrefetchBytes = 8 << 10;

// The weight prefetches of one tile or stream group, with
// SoftwarePrefetch(type) read once when it starts: that is a relaxed atomic
// load (TuneWeightPrefetch may change it while products run), which
// compilers leave where it is written, so read at each prefetch it cost a
// load, a test and a branch per prefetch in the hot loops.
class WeightPrefetcher {
 public:
  explicit WeightPrefetcher(WeightType type)
      : software_(SoftwarePrefetch(type)) {}

  // A single stream prefetches the line `ahead` bytes past p with the
  // non-temporal hint (the weights are read once per step), where
  // SoftwarePrefetch(type).
  void Stream(const void* p, int64_t ahead = kStreamPrefetchBytes) const {
    if (software_)
      __builtin_prefetch(static_cast<const char*>(p) + ahead, 0, 0);
  }

  // The tiles of several weight rows (one stream each) prefetch p into every
  // cache level (their callers say how far ahead): against one activation
  // row where SoftwarePrefetch(type) (the products TuneWeightPrefetch
  // times), against more always (without it decode with 8 sequences ran a
  // third slower on the Zen 3 VM whose one-row bf16 products it sped up).
  template <int kActivationRows>
  void TileRow(const void* p) const {
    if (kActivationRows > 1 || software_) __builtin_prefetch(p, 0, 3);
  }

 private:
  bool software_;
};

// Prefetches, in each of R sequential streams `stride` bytes apart (one
// row, or ForEachOneRowTile's stream groups), the line
// kStreamPrefetchBytes past `p` plus `ahead`, as WeightPrefetcher::Stream
// says.
template <int R>
inline void PrefetchStreams(const WeightPrefetcher& prefetch, const void* p,
                            int64_t stride, int64_t ahead) {
  for (int i = 0; i < R; ++i)
    prefetch.Stream(static_cast<const char*>(p) + i * stride + ahead);
}

// fn(std::integral_constant<int, count>()) for a run-time count in [1, kMax].
template <int kMax, typename Fn>
void WithCount(int64_t count, const Fn& fn) {
  if constexpr (kMax > 1) {
    if (count < kMax) return WithCount<kMax - 1>(count, fn);
  }
  fn(std::integral_constant<int, kMax>());
}

// Rows [rb, re) against one activation row of `activation_bytes`, as
// ForEachStreamGroup's streams: kStreamSegments while the activations stay
// in L1 (ShortActivationBytes()), kLongRowStreams beyond (tiles of four
// adjacent rows, which read the activations once per four, drew less from
// memory in its faster state). `tile(r0, stride,
// std::integral_constant<int, R>())` computes rows r0 + i * stride, i < R,
// each row's sum formed alike whatever the grouping. A kernel whose long
// rows were measured faster in fewer streams names its own kLongStreams.
template <int kLongStreams = kLongRowStreams, typename TileFn>
void ForEachOneRowTile(int64_t activation_bytes, int64_t rb, int64_t re,
                       const TileFn& tile) {
  if (activation_bytes <= ShortActivationBytes()) {
    ForEachStreamGroup<kStreamSegments>(rb, re, tile);
  } else {
    ForEachStreamGroup<kLongStreams>(rb, re, tile);
  }
}

// The fp8 products' weight rows [rb, re) as runs within one block of
// w.block_rows rows (rows that share one scale per column block):
// fn(begin, end, block) for each, block being ScaleFp8Activations's
// `row_block`.
template <typename Fn>
void ForEachFp8RowBlock(const Matrix& w, int64_t rb, int64_t re, const Fn& fn) {
  for (int64_t begin = rb; begin < re;) {
    const int64_t block = begin / w.block_rows;
    const int64_t end = Min<int64_t>(re, (block + 1) * w.block_rows);
    fn(begin, end, block);
    begin = end;
  }
}

// fp8 e4m3 weights widened as float32 bit patterns (avx2_products.h's
// Fp8TimesTwoToMinus120, avx512.cc's Fp8Tile): a byte whose exponent and
// mantissa sit where a float's do, its sign in bit 31, is that float once
// kFp8FloatBitsMask clears the rest, its value times 2^-120 (an fp8
// subnormal becomes the float subnormal of the same value times 2^-120).
// The decode products' activations take kFp8ActivationUnit of the 2^120 and
// their sums the other kFp8SumUnit, so every product and sum is the true
// one times a power of two and rounds alike, unless an activation times its
// scale reaches 2^64 or a sum is below 2^-70 (with all of 2^120 on the
// activations, one times its scale would overflow from 2^8).
constexpr int32_t kFp8FloatBitsMask = static_cast<int32_t>(0x87f00000u);
constexpr float kFp8ActivationUnit = 0x1p64f;
constexpr float kFp8SumUnit = 0x1p56f;

// An mxfp4 block's e8m0 scale 2^(e - 127), exactly (subnormal for e = 0).
inline float E8m0ToF32Exact(uint32_t e) {
  const uint32_t bits = e >= 1 ? e << 23 : 0x00400000u;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

// An e2m1 nibble's value (bit 3 the sign; 8 is -0).
inline float E2m1ToF32(uint32_t nibble) {
  static constexpr float kValues[16] = {0.f,  0.5f, 1.f,  1.5f,  2.f,  3.f,
                                        4.f,  6.f,  -0.f, -0.5f, -1.f, -1.5f,
                                        -2.f, -3.f, -4.f, -6.f};
  return kValues[nibble & 15];
}

// Two consecutive f16 group scales as one 32-bit integer, for
// _mm_cvtsi32_si128 and a conversion of both.
inline int32_t Halves32(const uint16_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
