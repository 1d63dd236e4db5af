// The counter RNG and the synthetic teacher data (see data.h for the exact
// definitions). Stateless functions and immutable objects; thread-safe.
#include "agent/worker/data/data.h"

#include <cmath>
#include <cstring>

#include "agent/worker/clones.h"

namespace xl::worker {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kLn2 = 0.6931471805599453094;
constexpr double kSqrt2 = 1.4142135623730950488;

inline uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Log(t) for 0 < t <= 1 (a normal double): t = 2^e f with f in
// [sqrt(1/2), sqrt(2)) by the bits (exact), then log f = 2 atanh(s),
// s = (f - 1) / (f + 1), |s| <= 0.172, by its series to s^15 (the next
// term is below 3e-14 relative; the result is rounded to float).
inline double Log(double t) {
  uint64_t bits;
  std::memcpy(&bits, &t, sizeof(bits));
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((1ull << 52) - 1)) | (1023ull << 52);
  double f;
  std::memcpy(&f, &bits, sizeof(f));
  const bool high = f > kSqrt2;  // selects, not branches: u is random
  f = high ? f * 0.5 : f;
  e += high ? 1 : 0;
  const double s = (f - 1.0) / (f + 1.0);
  const double z = s * s;
  double p = 1.0 / 15;
  p = p * z + 1.0 / 13;
  p = p * z + 1.0 / 11;
  p = p * z + 1.0 / 9;
  p = p * z + 1.0 / 7;
  p = p * z + 1.0 / 5;
  p = p * z + 1.0 / 3;
  p = p * z + 1.0;
  return static_cast<double>(e) * kLn2 + 2.0 * s * p;
}

// sin and cos of x in [0, pi/4], Taylor to x^15 / x^14 (the next terms are
// below 1e-15).
inline void SinCosSmall(double x, double* sin_x, double* cos_x) {
  const double z = x * x;
  double ps = -1.0 / 1307674368000.0;           // 1/15!
  ps = ps * z + 1.0 / 6227020800.0;             // 1/13!
  ps = ps * z - 1.0 / 39916800.0;               // 1/11!
  ps = ps * z + 1.0 / 362880.0;                 // 1/9!
  ps = ps * z - 1.0 / 5040.0;                   // 1/7!
  ps = ps * z + 1.0 / 120.0;                    // 1/5!
  ps = ps * z - 1.0 / 6.0;                      // 1/3!
  ps = ps * z + 1.0;
  *sin_x = x * ps;
  double pc = -1.0 / 87178291200.0;             // 1/14!
  pc = pc * z + 1.0 / 479001600.0;              // 1/12!
  pc = pc * z - 1.0 / 3628800.0;                // 1/10!
  pc = pc * z + 1.0 / 40320.0;                  // 1/8!
  pc = pc * z - 1.0 / 720.0;                    // 1/6!
  pc = pc * z + 1.0 / 24.0;                     // 1/4!
  pc = pc * z - 0.5;
  pc = pc * z + 1.0;
  *cos_x = pc;
}

// cos and sin of 2 pi u for u in [0, 1): the quadrant and the position in it
// are exact (u * 4 is exact); the angle in the quadrant is folded to
// [0, pi/4] by symmetry, and the quadrant rotates the pair.
inline void CosSinTurns(double u, double* cos_a, double* sin_a) {
  const double q4 = u * 4.0;
  const int q = static_cast<int>(q4);  // 0..3
  const double w = q4 - q;              // [0, 1), exact
  // Selects, not branches (u is random, a branch would mispredict half
  // the time). Past the octant, angle = pi/2 - (1 - w) pi/2: sin and cos
  // swap. Quadrant q rotates (c, s) by q pi/2: (c, s), (-s, c), (-c, -s),
  // (s, -c); multiplying by +-1 is exact.
  const bool fold = w > 0.5;
  double s0, c0;
  SinCosSmall((fold ? 1.0 - w : w) * (kPi / 2), &s0, &c0);
  const bool swap = fold != ((q & 1) != 0);
  const double c = swap ? s0 : c0;
  const double s = swap ? c0 : s0;
  *cos_a = (q == 1 || q == 2) ? -c : c;
  *sin_a = q >= 2 ? -s : s;
}

inline double UniformOf(uint64_t h) {
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// Normals 2p and 2p + 1 of the stream whose key is Mix(Mix(seed) ^ stream).
inline void NormalPair(uint64_t key, uint64_t p, float* a, float* b) {
  const double r = std::sqrt(-2.0 * Log(1.0 - UniformOf(Mix(key ^ (2 * p)))));
  double c, s;
  CosSinTurns(UniformOf(Mix(key ^ (2 * p + 1))), &c, &s);
  *a = static_cast<float>(r * c);
  *b = static_cast<float>(r * s);
}

// kBlock pairs p0, p0 + 1, ... into out[0 .. 2 kBlock): the same function
// as NormalPair, stage by stage over arrays, so that the compiler runs the
// pairs side by side (SIMD lanes, or at least independent chains) instead
// of one long dependent chain of polynomial steps after another.
constexpr int kBlock = 8;
inline void NormalBlock(uint64_t key, uint64_t p0, float* out) {
  double u1[kBlock], u2[kBlock], r[kBlock], c[kBlock], s[kBlock];
  for (int i = 0; i < kBlock; ++i) {
    u1[i] = UniformOf(Mix(key ^ (2 * (p0 + i))));
    u2[i] = UniformOf(Mix(key ^ (2 * (p0 + i) + 1)));
  }
  for (int i = 0; i < kBlock; ++i) r[i] = std::sqrt(-2.0 * Log(1.0 - u1[i]));
  for (int i = 0; i < kBlock; ++i) CosSinTurns(u2[i], &c[i], &s[i]);
  for (int i = 0; i < kBlock; ++i) {
    out[2 * i] = static_cast<float>(r[i] * c[i]);
    out[2 * i + 1] = static_cast<float>(r[i] * s[i]);
  }
}

inline uint64_t StreamKey(uint64_t seed, uint64_t stream) {
  return Mix(Mix(seed) ^ stream);
}

inline float SymmetricWeight(uint64_t seed, uint64_t stream, uint64_t index,
                             int fan_in) {
  double u = CounterUniform(seed, stream, index);
  return static_cast<float>((2.0 * u - 1.0) /
                            std::sqrt(static_cast<double>(fan_in)));
}

}  // namespace

uint64_t CounterHash(uint64_t seed, uint64_t stream, uint64_t index) {
  return Mix(StreamKey(seed, stream) ^ index);
}

float CounterUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(CounterHash(seed, stream, index) >> 40) *
         (1.0f / 16777216.0f);
}

float CounterNormal(uint64_t seed, uint64_t stream, uint64_t index) {
  float pair[2];
  NormalPair(StreamKey(seed, stream), index / 2, &pair[0], &pair[1]);
  return pair[index & 1];
}

void CounterNormals(uint64_t seed, uint64_t stream, uint64_t first,
                    uint64_t count, float* out) {
  if (count == 0) return;
  const uint64_t key = StreamKey(seed, stream);
  uint64_t i = 0;
  float pair[2];
  if (first & 1) {  // a leading odd element: the second of its pair
    NormalPair(key, first / 2, &pair[0], &pair[1]);
    out[i++] = pair[1];
  }
  for (; i + 2 * kBlock <= count; i += 2 * kBlock) {
    NormalBlock(key, (first + i) / 2, &out[i]);
  }
  for (; i + 1 < count; i += 2) {
    NormalPair(key, (first + i) / 2, &out[i], &out[i + 1]);
  }
  if (i < count) {
    NormalPair(key, (first + i) / 2, &pair[0], &pair[1]);
    out[i] = pair[0];
  }
}

float InitWeight(uint64_t seed, int layer, uint64_t index, int fan_in) {
  return SymmetricWeight(seed, kInitStream + static_cast<uint64_t>(layer),
                         index, fan_in);
}

Teacher::Teacher(const TrainConfig& config)
    : input_dim_(config.input_dim), classes_(config.classes) {
  // Element i = k * input_dim + j of W_t1 goes to w1t_[j * 64 + k].
  w1t_.resize(static_cast<size_t>(kTeacherHidden) * input_dim_);
  for (size_t i = 0; i < w1t_.size(); ++i) {
    const size_t k = i / input_dim_, j = i % input_dim_;
    w1t_[j * kTeacherHidden + k] =
        SymmetricWeight(config.seed, kTeacherStream + 1, i, input_dim_);
  }
  w2_.resize(static_cast<size_t>(classes_) * kTeacherHidden);
  for (size_t i = 0; i < w2_.size(); ++i) {
    w2_[i] =
        SymmetricWeight(config.seed, kTeacherStream + 2, i, kTeacherHidden);
  }
}

// Built for AVX2 too where the CPU has it (chosen at run time). Both clones
// compute the same bits: data.cc is built with -ffp-contract=off, so no
// clone fuses a multiply and an add, and lanes never reassociate a sum.
XL_CLONES_AVX2
int32_t Teacher::Label(const float* x) const {
  double h[kTeacherHidden] = {};
  for (int j = 0; j < input_dim_; ++j) {
    const float* w = &w1t_[static_cast<size_t>(j) * kTeacherHidden];
    const double xj = x[j];
    for (int k = 0; k < kTeacherHidden; ++k) {
      h[k] += static_cast<double>(w[k]) * xj;
    }
  }
  for (int k = 0; k < kTeacherHidden; ++k) h[k] = std::tanh(h[k]);
  int32_t best = 0;
  double best_v = 0;
  for (int c = 0; c < classes_; ++c) {
    const float* w = &w2_[static_cast<size_t>(c) * kTeacherHidden];
    double s = 0;
    for (int k = 0; k < kTeacherHidden; ++k)
      s += static_cast<double>(w[k]) * h[k];
    if (c == 0 || s > best_v) {
      best = c;
      best_v = s;
    }
  }
  return best;
}

SyntheticData::SyntheticData(const TrainConfig& config)
    : config_(config), teacher_(config) {}

void SyntheticData::Sample(uint64_t n, float* x, int32_t* label) const {
  CounterNormals(config_.seed, kDataStream + n, 0, config_.input_dim, x);
  *label = teacher_.Label(x);
}

void SyntheticData::Samples(uint64_t first, uint64_t count, float* x,
                            int32_t* labels) const {
  for (uint64_t i = 0; i < count; ++i) {
    Sample(first + i, x + i * config_.input_dim, &labels[i]);
  }
}

uint64_t SyntheticData::FirstSample(int64_t step, int rank, int world) const {
  const uint64_t b = config_.StepBatch();
  return static_cast<uint64_t>(step) * world * b + rank * b;
}

void SyntheticData::Batch(int64_t step, int rank, int world, float* x,
                          int32_t* labels) const {
  Samples(FirstSample(step, rank, world), config_.StepBatch(), x, labels);
}

void SyntheticBatch(const TrainConfig& config, int64_t step, int rank,
                    int world, float* x, int32_t* labels) {
  SyntheticData(config).Batch(step, rank, world, x, labels);
}

}  // namespace xl::worker
