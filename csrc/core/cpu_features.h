// The one CPU ISA dispatch of the C++ kernels: a loop is compiled once portable and once per newer ISA (popcnt, AVX2,
// AVX-512) through a target attribute (VLK_TARGET), and a run-time CPUID check (cpu_features) picks one, so the module
// still loads and runs on any x86-64 (and builds unchanged elsewhere). No target_clones: its ifunc resolvers do not
// mix with AddressSanitizer, and one mechanism reads more easily than two.
//
// With intrinsics, one VLK_TARGET function per ISA (csrc/boxes/rle_encode.cpp, mask_iou.cpp). For a plain loop the
// compiler vectorizes: write it once as a VLK_INLINE template, instantiate it in one VLK_TARGET wrapper per ISA (each
// copy is compiled for its wrapper's ISA), and choose the wrapper once per call:
//
//   template <typename T> VLK_INLINE int64_t count_row(const T* row, int64_t m, T t) { ...portable loop... }
//   template <typename T> int64_t count_row_base(const T* r, int64_t m, T t) { return count_row(r, m, t); }
//   #if VLK_X86_MULTIVERSION
//   template <typename T> VLK_TARGET("avx2") int64_t count_row_avx2(const T* r, int64_t m, T t) {
//     return count_row(r, m, t); }
//   #endif
//   auto* fn = vlk::cpu_has_avx2() ? count_row_avx2<float> : count_row_base<float>;   // (under the #if)
//
// VLKERNELS_CPU_ISA caps what is used: "baseline" (portable x86-64), "popcnt", "avx2", "avx512" (the default: all the
// CPU has). Tests run every copy the machine can (tests/test_cpu_isa.py); a user can rule a suspect copy out.
#pragma once

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VLK_X86_MULTIVERSION 1
#define VLK_TARGET(isa) __attribute__((target(isa)))
#else
#define VLK_X86_MULTIVERSION 0
#define VLK_TARGET(isa)
#endif

// Inlined into each VLK_TARGET wrapper, so its body is compiled for that wrapper's ISA.
#if defined(__GNUC__) || defined(__clang__)
#define VLK_INLINE inline __attribute__((always_inline))
#else
#define VLK_INLINE inline
#endif

namespace vlk {

// What the CPU supports, asked once (CPUID) at first use; all false where the build has no multiversioning.
struct CpuFeatures {
  bool popcnt = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512bw = false;
};

inline const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    // 0 baseline, 1 popcnt, 2 avx2, 3 avx512: the highest level allowed.
    int cap = 3;
    if (const char* env = std::getenv("VLKERNELS_CPU_ISA"); env && *env) {
      const char* names[] = {"baseline", "popcnt", "avx2", "avx512"};
      cap = -1;
      for (int i = 0; i < 4; ++i)
        if (std::strcmp(env, names[i]) == 0) cap = i;
      if (cap < 0)
        throw std::invalid_argument(std::string("VLKERNELS_CPU_ISA must be one of baseline, popcnt, avx2, avx512, got '") +
                                    env + "'");
    }
#if VLK_X86_MULTIVERSION
    f.popcnt = cap >= 1 && __builtin_cpu_supports("popcnt");
    f.avx2 = cap >= 2 && __builtin_cpu_supports("avx2");
    f.avx512f = cap >= 3 && __builtin_cpu_supports("avx512f");
    f.avx512bw = cap >= 3 && __builtin_cpu_supports("avx512bw");
#else
    (void)cap;
#endif
    return f;
  }();
  return features;
}

inline bool cpu_has_popcnt() { return cpu_features().popcnt; }
inline bool cpu_has_avx2() { return cpu_features().avx2; }
inline bool cpu_has_avx512f() { return cpu_features().avx512f; }
inline bool cpu_has_avx512bw() { return cpu_features().avx512bw; }

}  // namespace vlk
