// Function multiversioning for the CPU kernels: a loop is compiled once portable and once for a newer ISA
// (popcnt, AVX2, AVX-512BW) through a target attribute; a run-time CPUID check picks one, so the module still loads and
// runs on any x86-64 (and builds unchanged elsewhere).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VLK_X86_MULTIVERSION 1
#define VLK_TARGET(isa) __attribute__((target(isa)))
#else
#define VLK_X86_MULTIVERSION 0
#define VLK_TARGET(isa)
#endif

namespace vlk {

// What the CPU supports, asked once (CPUID) at first use; all false where the build has no multiversioning.
struct CpuFeatures {
  bool popcnt = false;
  bool avx2 = false;
  bool avx512bw = false;
};

inline const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if VLK_X86_MULTIVERSION
    f.popcnt = __builtin_cpu_supports("popcnt");
    f.avx2 = __builtin_cpu_supports("avx2");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
#endif
    return f;
  }();
  return features;
}

inline bool cpu_has_popcnt() { return cpu_features().popcnt; }
inline bool cpu_has_avx2() { return cpu_features().avx2; }
inline bool cpu_has_avx512bw() { return cpu_features().avx512bw; }

}  // namespace vlk
