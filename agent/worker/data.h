// The counter RNG and the synthetic teacher data that every xl-train backend
// shares. Plain host functions with no state: safe from any thread; the CUDA
// path calls them on the host (device libm may differ in the last bit, so do
// not reimplement Normal() on the device and expect equal numbers).
//
// Counter RNG, exactly:
//   Mix(z):  z += 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//            z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31);
//            (SplitMix64's step and finalizer; all arithmetic mod 2^64)
//   Hash(seed, stream, index) = Mix(Mix(Mix(seed) ^ stream) ^ index)
//   Uniform(seed, stream, i)  = float(Hash(seed, stream, i) >> 40) * 2^-24,
//                               exactly representable, in [0, 1)
//   Normal(seed, stream, j)   = float( sqrt(-2 log(1 - u1)) * cos(2 pi u2) ),
//       u1 = Uniform(seed, stream, 2j), u2 = Uniform(seed, stream, 2j + 1),
//       computed in double (std::log, std::sqrt, std::cos, pi =
//       3.14159265358979323846), then rounded to float. One normal per pair.
//   InitWeight(seed, l, i, fan_in) = float((2.0 * u - 1.0) / sqrt(fan_in)) in
//       double, u = Uniform(seed, kInitStream + l, i), l = 1..L.
//   Teacher: W_t1 [64 x input_dim], W_t2 [classes x 64], element i of layer
//       t (1 or 2) = float((2.0 * u - 1.0) / sqrt(fan_in)) with
//       u = Uniform(seed, kTeacherStream + t, i); biases 0. Label of x:
//       h = tanh(W_t1 x) and logits = W_t2 h, both in double over the float
//       weights and inputs; the label is the first index of the maximum.
//   SyntheticBatch(step, rank, world): row i is sample
//       n = step * world * batch_per_rank + rank * batch_per_rank + i, with
//       x[j] = Normal(seed, kDataStream + n, j). `step` is 0-based: the batch
//       of the (step+1)-th optimizer update.
#ifndef XL_AGENT_WORKER_DATA_H_
#define XL_AGENT_WORKER_DATA_H_

#include <cstdint>
#include <vector>

#include "agent/worker/train_config.h"

namespace xl::worker {

uint64_t CounterHash(uint64_t seed, uint64_t stream, uint64_t index);
float CounterUniform(uint64_t seed, uint64_t stream, uint64_t index);
float CounterNormal(uint64_t seed, uint64_t stream, uint64_t index);
// W_l[i] of the student's init; see above. `layer` is 1-based.
float InitWeight(uint64_t seed, int layer, uint64_t index, int fan_in);

// The fixed random teacher network that labels synthetic samples.
// Immutable after construction; safe to share between threads.
class Teacher {
 public:
  explicit Teacher(const TrainConfig& config);
  // The label of one sample x[0..input_dim).
  int32_t Label(const float* x) const;

 private:
  int input_dim_;
  int classes_;
  std::vector<float> w1_;  // [kTeacherHidden x input_dim]
  std::vector<float> w2_;  // [classes x kTeacherHidden]
};

// The synthetic source with its teacher built once. Immutable; thread-safe.
class SyntheticData {
 public:
  explicit SyntheticData(const TrainConfig& config);
  // Fills x [batch_per_rank x input_dim] (row-major) and labels
  // [batch_per_rank] for `rank` of `world` at 0-based `step`.
  void Batch(int64_t step, int rank, int world, float* x,
             int32_t* labels) const;
  // Fills sample number n (x[0..input_dim), *label).
  void Sample(uint64_t n, float* x, int32_t* label) const;

 private:
  TrainConfig config_;
  Teacher teacher_;
};

// The same as SyntheticData(config).Batch(...); builds the teacher each call.
void SyntheticBatch(const TrainConfig& config, int64_t step, int rank,
                    int world, float* x, int32_t* labels);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_DATA_H_
