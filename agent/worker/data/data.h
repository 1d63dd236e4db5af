// The counter RNG and the synthetic teacher data that every xl-train backend
// shares. Plain host functions with no state: safe from any thread; the CUDA
// path calls them on the host too (BatchProducer). The inputs are made of
// IEEE basic operations only, so a device port could match them bit for
// bit; the teacher's tanh is libm's and is not.
//
// Counter RNG, exactly:
//   Mix(z):  z += 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//            z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31);
//            (SplitMix64's step and finalizer; all arithmetic mod 2^64)
//   Hash(seed, stream, index) = Mix(Mix(Mix(seed) ^ stream) ^ index)
//   Uniform(seed, stream, i)  = float(Hash(seed, stream, i) >> 40) * 2^-24,
//                               exactly representable, in [0, 1)
//   Normal(seed, stream, j): normals come in pairs. Pair p = j / 2 takes
//       u1 = Uniform(seed, stream, 2p), u2 = Uniform(seed, stream, 2p + 1),
//       r = sqrt(-2 Log(1 - u1)) and a = 2 pi u2; normal 2p is
//       float(r * Cos(a)) and normal 2p + 1 is float(r * Sin(a)), in double.
//       Log, Cos and Sin are xl's own (data.cc: an exact power-of-two
//       reduction, then fixed polynomials) made of +, -, *, / and sqrt only,
//       evaluated without fused multiply-adds (data.cc is built with
//       -ffp-contract=off): every IEEE-754 machine (any x86 or Arm CPU, a
//       GPU with fmad off) gets the same bits, which libm's log and cos do
//       not promise, and they cost a few nanoseconds instead of tens. They
//       agree with libm to about 1e-13 relative, so the floats differ from
//       libm's Box-Muller in the last bit at most, for about one value in
//       10^5 (CounterRng.NormalsMatchLibmAndArePinned).
//   InitWeight(seed, l, i, fan_in) = float((2.0 * u - 1.0) / sqrt(fan_in)) in
//       double, u = Uniform(seed, kInitStream + l, i), l = 1..L.
//   Teacher: W_t1 [64 x input_dim], W_t2 [classes x 64], element i of layer
//       t (1 or 2) = float((2.0 * u - 1.0) / sqrt(fan_in)) with
//       u = Uniform(seed, kTeacherStream + t, i); biases 0. Label of x:
//       h = tanh(W_t1 x) and logits = W_t2 h, both in double over the float
//       weights and inputs, each dot product summed in index order; the
//       label is the first index of the maximum.
//   SyntheticBatch(step, rank, world): row i is sample
//       n = step * world * B + rank * B + i (B = StepBatch()), with
//       x[j] = Normal(seed, kDataStream + n, j). `step` is 0-based: the batch
//       of the (step+1)-th optimizer update.
#ifndef XL_AGENT_WORKER_DATA_DATA_H_
#define XL_AGENT_WORKER_DATA_DATA_H_

#include <cstdint>
#include <vector>

#include "agent/worker/loop/train_config.h"

namespace xl::worker {

uint64_t CounterHash(uint64_t seed, uint64_t stream, uint64_t index);
float CounterUniform(uint64_t seed, uint64_t stream, uint64_t index);
float CounterNormal(uint64_t seed, uint64_t stream, uint64_t index);
// W_l[i] of the student's init; see above. `layer` is 1-based.
float InitWeight(uint64_t seed, int layer, uint64_t index, int fan_in);

// Fills out[0..count) with Normal(seed, stream, first + i); the fast path
// of the same function (whole pairs at a time).
void CounterNormals(uint64_t seed, uint64_t stream, uint64_t first,
                    uint64_t count, float* out);

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
  // W_t1 transposed, [input_dim x kTeacherHidden]: the 64 dot products of
  // a sample advance together over j, each still summed in index order
  // (so the label is the definition's), and the compiler vectorizes across
  // them without reassociating anything.
  std::vector<float> w1t_;
  std::vector<float> w2_;  // [classes x kTeacherHidden]
};

// The synthetic source with its teacher built once. Immutable; thread-safe.
class SyntheticData {
 public:
  explicit SyntheticData(const TrainConfig& config);
  // Fills x [StepBatch() x input_dim] (row-major) and labels
  // [StepBatch()] for `rank` of `world` at 0-based `step`.
  void Batch(int64_t step, int rank, int world, float* x,
             int32_t* labels) const;
  // Fills sample number n (x[0..input_dim), *label).
  void Sample(uint64_t n, float* x, int32_t* label) const;
  // Fills `count` consecutive samples first, first + 1, ... (row-major).
  void Samples(uint64_t first, uint64_t count, float* x,
               int32_t* labels) const;
  // Sample number of row 0 of `rank`'s batch at 0-based `step`.
  uint64_t FirstSample(int64_t step, int rank, int world) const;
  const TrainConfig& config() const { return config_; }

 private:
  TrainConfig config_;
  Teacher teacher_;
};

// The same as SyntheticData(config).Batch(...); builds the teacher each call.
void SyntheticBatch(const TrainConfig& config, int64_t step, int rank,
                    int world, float* x, int32_t* labels);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_DATA_DATA_H_
