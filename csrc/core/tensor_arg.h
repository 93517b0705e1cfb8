// Tensors crossing into C++: any DLPack-capable object (torch tensor, numpy array) becomes a TensorArg that holds
// strong references to the object and its DLPack capsule for as long as it lives, and whose checks (dtype, device,
// rank, shape, strides) throw a ValueError naming the argument. No libtorch: the DLPack ABI structs are declared
// here (https://github.com/dmlc/dlpack, v1.0 layout, and the C exchange API of v1.2 where the producer has it).
//
// Pattern for a binding (construct every TensorArg before releasing the GIL, so they are destroyed after it is
// taken back):
//   auto x = vlk::TensorArg::from(obj, "scores").ndim(2).dtype_in({vlk::kF32, vlk::kF64}).device(vlk::kCPU);
//   py::gil_scoped_release release;
//   vlk::dispatch_float(x, [&](auto tag) { using T = decltype(tag); run(x.data<T>(), ...); });
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace vlk {

namespace dlpack {
struct Device {
  int32_t device_type;
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};
struct ManagedTensorVersioned {
  uint32_t major, minor;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned*);
  uint64_t flags;
  Tensor dl_tensor;
};
constexpr uint64_t kFlagReadOnly = 1;
// DLPack's C exchange API (DLPack 1.2, torch >= 2.9), found on the producer's type as the capsule
// __dlpack_c_exchange_api__: it fills a managed tensor from C, without the Python-level __dlpack__ call (about 6 us
// per torch tensor, as much as a small kernel's whole run). Only the function used here is typed.
struct ExchangeAPI {
  uint32_t major, minor;
  void* prev_api;
  void* managed_tensor_allocator;
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensorVersioned** out);
  void* managed_tensor_to_py_object_no_sync;
  void* dltensor_from_py_object_no_sync;
  void* current_work_stream;
};
enum Code : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6 };
}  // namespace dlpack

// Device types (DLPack numbering).
constexpr int32_t kCPU = 1;
constexpr int32_t kCUDA = 2;

// The element types the kernels use.
enum class DType { f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, boolean, other };
constexpr DType kF16 = DType::f16, kBF16 = DType::bf16, kF32 = DType::f32, kF64 = DType::f64;
constexpr DType kI32 = DType::i32, kI64 = DType::i64, kU8 = DType::u8, kBool = DType::boolean;

inline const char* dtype_name(DType t) {
  static const char* names[] = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
                                "int64",   "uint8",    "uint16",  "uint32",  "uint64", "bool", "other"};
  return names[static_cast<int>(t)];
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <>
constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <>
constexpr DType dtype_of<uint32_t>() { return DType::u32; }
template <>
constexpr DType dtype_of<uint64_t>() { return DType::u64; }

inline DType to_dtype(const dlpack::DataType& t) {
  if (t.lanes != 1) return DType::other;
  switch (t.code) {
    case dlpack::kFloat:
      return t.bits == 16 ? DType::f16 : t.bits == 32 ? DType::f32 : t.bits == 64 ? DType::f64 : DType::other;
    case dlpack::kBfloat:
      return t.bits == 16 ? DType::bf16 : DType::other;
    case dlpack::kInt:
      return t.bits == 8 ? DType::i8 : t.bits == 16 ? DType::i16 : t.bits == 32 ? DType::i32 : t.bits == 64 ? DType::i64 : DType::other;
    case dlpack::kUInt:
      return t.bits == 8 ? DType::u8 : t.bits == 16 ? DType::u16 : t.bits == 32 ? DType::u32 : t.bits == 64 ? DType::u64 : DType::other;
    case dlpack::kBool:
      return t.bits == 8 ? DType::boolean : DType::other;
    default:
      return DType::other;
  }
}

class TensorArg {
 public:
  // Needs the GIL. Raises TypeError when obj has no __dlpack__, ValueError when its producer refuses to export it
  // (e.g. a torch tensor that requires grad: pass .detach()).
  static TensorArg from(pybind11::handle obj, const char* name) {
    namespace py = pybind11;
    TensorArg a;
    a.name_ = name;
    a.owner_ = py::reinterpret_borrow<py::object>(obj);
    // Neither DLPack path carries torch's negative bit: the data would be read with the wrong sign.
    if (type_has(obj, "is_neg") && obj.attr("is_neg")().cast<bool>()) {
      a.refuse("is a view with torch's negative bit set (e.g. x.conj().imag): call .resolve_neg()");
    }
    if (const dlpack::ExchangeAPI* api = exchange_api(obj)) {
      a.from_exchange_api(api);
    } else {
      a.from_capsule();
    }
    if (a.t_.ndim < 0) a.refuse("negative rank");
    a.shape_.assign(a.t_.shape, a.t_.shape + a.t_.ndim);
    if (a.t_.strides != nullptr) {
      a.strides_.assign(a.t_.strides, a.t_.strides + a.t_.ndim);
    } else {
      a.strides_.assign(a.t_.ndim, 1);
      for (int d = a.t_.ndim - 2; d >= 0; --d) a.strides_[d] = a.strides_[d + 1] * a.shape_[d + 1];
    }
    a.numel_ = 1;
    for (int64_t s : a.shape_) {
      if (s < 0) a.refuse("has a negative extent");
      if (__builtin_mul_overflow(a.numel_, s, &a.numel_)) a.refuse("has more than 2^63 elements");
    }
    return a;
  }

  const std::string& name() const { return name_; }
  DType dtype() const { return to_dtype(t_.dtype); }
  int32_t device_type() const { return t_.device.device_type; }
  int32_t device_id() const { return t_.device.device_id; }
  int64_t ndim() const { return t_.ndim; }
  int64_t size(int64_t d) const { return shape_.at(static_cast<size_t>(d)); }
  int64_t stride(int64_t d) const { return strides_.at(static_cast<size_t>(d)); }
  int64_t numel() const { return numel_; }
  bool read_only() const { return read_only_; }

  TensorArg& dtype_in(std::initializer_list<DType> allowed) {
    for (DType d : allowed)
      if (d == dtype()) return *this;
    std::ostringstream os;
    os << "has dtype " << dtype_name(dtype()) << "; expected one of";
    for (DType d : allowed) os << ' ' << dtype_name(d);
    refuse(os.str());
    return *this;
  }
  TensorArg& dtype_is(DType want) { return dtype_in({want}); }
  TensorArg& device(int32_t type) {
    if (device_type() != type) {
      refuse("is on device type " + std::to_string(device_type()) + " (DLPack numbering); expected " +
             (type == kCPU ? std::string("cpu") : type == kCUDA ? std::string("cuda") : std::to_string(type)));
    }
    return *this;
  }
  // Same device (type and index) as other.
  TensorArg& same_device(const TensorArg& other) {
    if (device_type() != other.device_type() || device_id() != other.device_id()) {
      refuse("is not on the same device as " + other.name_);
    }
    return *this;
  }
  TensorArg& ndim(int64_t want) {
    if (t_.ndim != want) refuse("must have " + std::to_string(want) + " dimensions, got shape " + shape_str());
    return *this;
  }
  // Extent of dimension d (requires the rank checked first).
  TensorArg& size(int64_t d, int64_t want, const char* what = nullptr) {
    if (size(d) != want) {
      refuse("must have size " + std::to_string(want) + " in dimension " + std::to_string(d) +
             (what ? std::string(" (") + what + ")" : std::string()) + ", got shape " + shape_str());
    }
    return *this;
  }
  // Elements of the last `dims` dimensions adjacent (row-major); the leading ones may have any non-negative stride.
  TensorArg& inner_contiguous(int64_t dims) {
    if (numel_ == 0) return *this;  // nothing is read: producers give empty tensors arbitrary strides (e.g. 0)
    int64_t expect = 1;
    for (int64_t d = t_.ndim - 1; d >= t_.ndim - dims && d >= 0; --d) {
      if (shape_[d] != 1 && strides_[d] != expect) refuse("must be contiguous in its last " +
                                                           std::to_string(dims) + " dimension(s), got strides " +
                                                           strides_str() + "; call .contiguous()");
      expect *= shape_[d];
    }
    for (int64_t d = 0; d < t_.ndim; ++d) {  // a length-1 dimension's stride is never stepped (numpy may leave it < 0)
      if (shape_[d] != 1 && strides_[d] < 0) refuse("has a negative stride " + strides_str());
    }
    return *this;
  }
  TensorArg& contiguous() { return inner_contiguous(t_.ndim); }
  TensorArg& writable() {
    if (read_only_) refuse("is read-only but is written to");
    return *this;
  }

  // Typed data pointer (byte_offset applied); the dtype must match T. Valid while this TensorArg lives.
  template <typename T>
  T* data() const {
    if (dtype() != dtype_of<std::remove_const_t<T>>()) {
      refuse(std::string("internal: read as ") + dtype_name(dtype_of<std::remove_const_t<T>>()) + " but holds " +
             dtype_name(dtype()));
    }
    return reinterpret_cast<T*>(static_cast<char*>(t_.data) + t_.byte_offset);
  }

  [[noreturn]] void refuse(const std::string& why) const { throw pybind11::value_error(name_ + " " + why); }

 private:
  // The Python-level protocol: owner_.__dlpack__(). The capsule stays unconsumed: its destructor (run when capsule_
  // drops) releases the producer's reference.
  void from_capsule() {
    namespace py = pybind11;
    if (!py::hasattr(owner_, "__dlpack__") || !py::hasattr(owner_, "__dlpack_device__")) {
      throw py::type_error(name_ + " must be a tensor or array supporting DLPack (torch.Tensor, "
                           "numpy.ndarray), got " + std::string(py::str(py::type::handle_of(owner_).attr("__name__"))));
    }
    int32_t dev_type = 0;
    try {
      const py::object dev = owner_.attr("__dlpack_device__")();
      // DLPack: a (device_type, device_id) tuple of ints; anything else is the producer's fault, named as such.
      const py::tuple pair = py::isinstance<py::tuple>(dev) ? py::reinterpret_borrow<py::tuple>(dev) : py::tuple();
      const bool ok = pair.size() == 2 && py::isinstance<py::int_>(pair[0]) && py::isinstance<py::int_>(pair[1]);
      if (!ok) {
        refuse("cannot be exported through DLPack: __dlpack_device__() returned " + std::string(py::repr(dev)) +
               ", expected a (device_type, device_id) tuple of two ints");
      }
      const int64_t t = pair[0].cast<int64_t>();
      if (t < 0 || t > INT32_MAX) refuse("cannot be exported through DLPack: device type " + std::to_string(t));
      dev_type = static_cast<int32_t>(t);
    } catch (py::error_already_set& e) {
      refuse_export(e);
    } catch (py::cast_error&) {
      refuse("cannot be exported through DLPack: __dlpack_device__() returned a device type that is not an int64");
    }
    py::dict kwargs;
    if (dev_type != kCPU) kwargs["stream"] = -1;  // the kernel runs on the producer's current stream: no sync
    try {
      kwargs["max_version"] = py::make_tuple(1, 0);
      capsule_ = owner_.attr("__dlpack__")(**kwargs);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) refuse_export(e);
      // A producer from before DLPack 1.0 has no max_version keyword.
      kwargs = py::dict();
      if (dev_type != kCPU) kwargs["stream"] = -1;
      try {
        capsule_ = owner_.attr("__dlpack__")(**kwargs);
      } catch (py::error_already_set& e2) {
        refuse_export(e2);
      }
    }
    PyObject* cap = capsule_.ptr();
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
      auto* m = static_cast<dlpack::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
      if (m->major != 1) refuse("unsupported DLPack major version " + std::to_string(m->major));
      t_ = m->dl_tensor;
      read_only_ = (m->flags & dlpack::kFlagReadOnly) != 0;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
      t_ = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
    } else {
      refuse("__dlpack__ did not return an unconsumed DLPack capsule");
    }
  }

  // The C exchange API: the producer's own managed tensor (it holds the storage), released by its deleter. torch's
  // export through it skips the checks of its __dlpack__; the two that matter for real dtypes are made here.
  void from_exchange_api(const dlpack::ExchangeAPI* api) {
    namespace py = pybind11;
    if (type_has(owner_, "requires_grad") && owner_.attr("requires_grad").cast<bool>()) {
      refuse("cannot be exported through DLPack (a tensor that requires grad: pass .detach())");
    }
    dlpack::ManagedTensorVersioned* m = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(owner_.ptr(), &m) != 0 || m == nullptr) {
      if (!PyErr_Occurred()) refuse("cannot be exported through DLPack (its producer returned no tensor)");
      py::error_already_set e;
      refuse_export(e);
    }
    managed_ = std::shared_ptr<dlpack::ManagedTensorVersioned>(m, [](dlpack::ManagedTensorVersioned* p) {
      if (p->deleter != nullptr) p->deleter(p);
    });
    if (m->major != 1) refuse("unsupported DLPack major version " + std::to_string(m->major));
    t_ = m->dl_tensor;
    read_only_ = (m->flags & dlpack::kFlagReadOnly) != 0;
  }

  // The producer type's C exchange API, or null (numpy, older torch, a table of another major version).
  static const dlpack::ExchangeAPI* exchange_api(pybind11::handle obj) {
    PyObject* cap = type_attr(obj, "__dlpack_c_exchange_api__");
    if (cap == nullptr || !PyCapsule_IsValid(cap, "dlpack_exchange_api")) return nullptr;
    // The table lives as long as the process (DLPack's rule for producers).
    const auto* api = static_cast<const dlpack::ExchangeAPI*>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
    if (api == nullptr || api->major != 1 || api->managed_tensor_from_py_object_no_sync == nullptr) return nullptr;
    return api;
  }

  // An attribute of obj's type (borrowed), or null; looked up in the type's MRO without raising AttributeError,
  // which costs more than the rest of a numpy array's export.
  static PyObject* type_attr(pybind11::handle obj, const char* name) {
    PyObject* key = PyUnicode_InternFromString(name);
    if (key == nullptr) throw pybind11::error_already_set();
    PyObject* found = _PyType_Lookup(Py_TYPE(obj.ptr()), key);
    Py_DECREF(key);
    return found;
  }
  static bool type_has(pybind11::handle obj, const char* name) { return type_attr(obj, name) != nullptr; }

  [[noreturn]] void refuse_export(const pybind11::error_already_set& e) const {
    // KeyboardInterrupt (a pending Ctrl-C the producer's code noticed) and other non-Exception errors pass through
    // unchanged: they say nothing about the argument.
    if (!e.matches(PyExc_Exception)) throw e;
    const std::string type = pybind11::str(e.type().attr("__name__"));
    refuse("cannot be exported through DLPack (" + type + ": " + std::string(pybind11::str(e.value())) + ")");
  }
  std::string shape_str() const { return list_str(shape_); }
  std::string strides_str() const { return list_str(strides_); }
  static std::string list_str(const std::vector<int64_t>& v) {
    std::ostringstream os;
    os << '(';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << (v.size() == 1 ? ",)" : ")");
    return os.str();
  }

  std::string name_;
  pybind11::object owner_, capsule_;
  std::shared_ptr<dlpack::ManagedTensorVersioned> managed_;
  dlpack::Tensor t_{};
  std::vector<int64_t> shape_, strides_;
  int64_t numel_ = 0;
  bool read_only_ = false;
};

// Calls fn(T{}) with T = float or double for dtype f32 / f64; anything else is a ValueError naming the argument.
template <typename F>
decltype(auto) dispatch_float(const TensorArg& arg, F&& fn) {
  switch (arg.dtype()) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    default:
      arg.refuse(std::string("has dtype ") + dtype_name(arg.dtype()) + "; expected float32 or float64");
  }
}

}  // namespace vlk
