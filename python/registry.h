// Each python/bind_<family>.cpp registers its functions with VLK_BIND(<family>) { ... }; bindings.cpp runs
// them all, so adding a family never edits a shared file.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace vlk::bind {

using Binder = void (*)(pybind11::module_&);
std::vector<std::pair<const char*, Binder>>& binders();

struct Register {
  Register(const char* name, Binder fn) { binders().emplace_back(name, fn); }
};

// Pointers arrive from Python as integers (tensor.data_ptr()); Python has validated dtype, device and extent.
template <typename T>
inline T* ptr(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

}  // namespace vlk::bind

#define VLK_BIND(family)                                                                     \
  static void vlk_bind_##family(pybind11::module_& m);                                       \
  static const ::vlk::bind::Register vlk_register_##family(#family, &vlk_bind_##family);     \
  static void vlk_bind_##family(pybind11::module_& m)
