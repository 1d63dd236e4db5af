// The counter RNG and the synthetic teacher data (see data.h for the exact
// definitions). Stateless functions and immutable objects; thread-safe.
#include "agent/worker/data.h"

#include <cmath>

namespace xl::worker {
namespace {

constexpr double kPi = 3.14159265358979323846;

inline uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline float SymmetricWeight(uint64_t seed, uint64_t stream, uint64_t index,
                             int fan_in) {
  double u = CounterUniform(seed, stream, index);
  return static_cast<float>((2.0 * u - 1.0) /
                            std::sqrt(static_cast<double>(fan_in)));
}

}  // namespace

uint64_t CounterHash(uint64_t seed, uint64_t stream, uint64_t index) {
  return Mix(Mix(Mix(seed) ^ stream) ^ index);
}

float CounterUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(CounterHash(seed, stream, index) >> 40) *
         (1.0f / 16777216.0f);
}

float CounterNormal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = CounterUniform(seed, stream, 2 * index);
  double u2 = CounterUniform(seed, stream, 2 * index + 1);
  double r = std::sqrt(-2.0 * std::log(1.0 - u1));
  return static_cast<float>(r * std::cos(2.0 * kPi * u2));
}

float InitWeight(uint64_t seed, int layer, uint64_t index, int fan_in) {
  return SymmetricWeight(seed, kInitStream + static_cast<uint64_t>(layer),
                         index, fan_in);
}

Teacher::Teacher(const TrainConfig& config)
    : input_dim_(config.input_dim), classes_(config.classes) {
  w1_.resize(static_cast<size_t>(kTeacherHidden) * input_dim_);
  for (size_t i = 0; i < w1_.size(); ++i) {
    w1_[i] = SymmetricWeight(config.seed, kTeacherStream + 1, i, input_dim_);
  }
  w2_.resize(static_cast<size_t>(classes_) * kTeacherHidden);
  for (size_t i = 0; i < w2_.size(); ++i) {
    w2_[i] =
        SymmetricWeight(config.seed, kTeacherStream + 2, i, kTeacherHidden);
  }
}

int32_t Teacher::Label(const float* x) const {
  double h[kTeacherHidden];
  for (int k = 0; k < kTeacherHidden; ++k) {
    const float* w = &w1_[static_cast<size_t>(k) * input_dim_];
    double s = 0;
    for (int j = 0; j < input_dim_; ++j) s += static_cast<double>(w[j]) * x[j];
    h[k] = std::tanh(s);
  }
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
  for (int j = 0; j < config_.input_dim; ++j) {
    x[j] = CounterNormal(config_.seed, kDataStream + n, j);
  }
  *label = teacher_.Label(x);
}

void SyntheticData::Batch(int64_t step, int rank, int world, float* x,
                          int32_t* labels) const {
  const uint64_t b = config_.batch_per_rank;
  const uint64_t first = static_cast<uint64_t>(step) * world * b + rank * b;
  for (uint64_t i = 0; i < b; ++i) {
    Sample(first + i, x + i * config_.input_dim, &labels[i]);
  }
}

void SyntheticBatch(const TrainConfig& config, int64_t step, int rank,
                    int world, float* x, int32_t* labels) {
  SyntheticData(config).Batch(step, rank, world, x, labels);
}

}  // namespace xl::worker
