// Function multiversioning for the worker's hot element-wise loops: on
// x86-64 the function is also built for AVX2 (and AVX-512), and the CPU
// picks a version at load time; elsewhere (aarch64 hosts such as GH200) it
// is built once. Every version must compute the same bits: the files that
// use these are built with -ffp-contract=off (CMakeLists.txt).
#ifndef XL_AGENT_WORKER_CLONES_H_
#define XL_AGENT_WORKER_CLONES_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XL_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#define XL_CLONES_AVX512_AVX2 \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define XL_CLONES_AVX2
#define XL_CLONES_AVX512_AVX2
#endif

#endif  // XL_AGENT_WORKER_CLONES_H_
