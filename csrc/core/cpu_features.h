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

inline bool cpu_has_popcnt() {
#if VLK_X86_MULTIVERSION
  static const bool has = __builtin_cpu_supports("popcnt");
  return has;
#else
  return false;
#endif
}

inline bool cpu_has_avx512bw() {
#if VLK_X86_MULTIVERSION
  static const bool has = __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

inline bool cpu_has_avx2() {
#if VLK_X86_MULTIVERSION
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

}  // namespace vlk
