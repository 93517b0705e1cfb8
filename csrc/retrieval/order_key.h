// Integer keys ordered as floating-point scores are, NaN below every number: comparisons and maxima over scores become
// integer arithmetic, which vectorises (a NaN-aware float maximum does not) and sorts by radix.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/cpu_features.h"

namespace vlk {

template <typename S>
using OrderKey = std::conditional_t<sizeof(S) == 4, int32_t, int64_t>;

template <typename S>
VLK_INLINE OrderKey<S> order_key(S v) {
  using K = OrderKey<S>;
  constexpr K kMag = std::numeric_limits<K>::max();
  constexpr K kInfBits = sizeof(S) == 4 ? K{0x7f800000} : static_cast<K>(0x7ff0000000000000LL);
  K i;
  std::memcpy(&i, &v, sizeof(K));
  const K key = i >= 0 ? i : (i ^ kMag);  // negative numbers: larger magnitude, smaller key
  return (i & kMag) > kInfBits ? std::numeric_limits<K>::min() : key;
}

template <typename S>
VLK_INLINE S from_order_key(OrderKey<S> key) {
  using K = OrderKey<S>;
  const K i = key >= 0 ? key : (key ^ std::numeric_limits<K>::max());
  S v;
  std::memcpy(&v, &i, sizeof(K));
  return v;
}

}  // namespace vlk
