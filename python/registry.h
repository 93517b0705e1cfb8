// Each python/bind_<family>.cpp registers its functions with VLK_BIND(<family>) { ... }; bindings.cpp runs
// them all, so adding a family never edits a shared file.
#pragma once

#include <pybind11/pybind11.h>

#include <utility>
#include <vector>

namespace vlk::bind {

using Binder = void (*)(pybind11::module_&);
std::vector<std::pair<const char*, Binder>>& binders();

struct Register {
  Register(const char* name, Binder fn) { binders().emplace_back(name, fn); }
};

}  // namespace vlk::bind

#define VLK_BIND(family)                                                                     \
  static void vlk_bind_##family(pybind11::module_& m);                                       \
  static const ::vlk::bind::Register vlk_register_##family(#family, &vlk_bind_##family);     \
  static void vlk_bind_##family(pybind11::module_& m)
