"""Makes Triton kernels under TRITON_INTERPRET=1 cost less Python, with the same results: the kernels' code still
runs interpreted, op by op. The test process installs it (tests/conftest.py), and so does every gloo rank
(tests/gloo_ranks.py).

Two loops of Triton 3.9's interpreter:
- Reductions: numpy for sum, min, max and argmin/argmax, but a Python loop over every element for any other combine
  function. tl.sort's compare-and-swap is built on ``xor_sum``, so an interpreted sort of a (32, 64) block cost
  about a second. The XOR reduction gets numpy's ``bitwise_xor.reduce``, as sums get ``np.sum``: exact on integers,
  the same result in any order.
- Every call of a jit function from a kernel re-scans triton.language's modules (``inspect.getmembers``) for the
  builtins to wrap, and wraps them again: ~60% of an interpreted retrieval kernel's time. The builtins of each module
  are listed once (on the first scan, at a kernel launch, before any is wrapped) and wrapped from that list, as the
  scan would, skipping those a wrapper of the same builtin stands in for already."""


def install() -> None:
    try:
        import inspect

        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return
    needed = (interpreter, "ReduceOps"), (interpreter, "_patch_builtin"), (interpreter, "_patch_attr"), (tl, "standard")
    if not all(hasattr(obj, name) for obj, name in needed) or not hasattr(tl.standard, "_xor_combine"):
        return  # another Triton's interpreter: left as it is (tests/test_fast_interpreter.py says so)
    ops = interpreter.ReduceOps
    if getattr(ops.apply_impl, "__wrapped__", None) is not None:
        return
    loop = ops.apply_impl

    def apply_impl(self, input):
        if self.combine_fn is tl.standard._xor_combine:
            x = input[0]
            xor = np.bitwise_xor.reduce(x.handle.data, axis=self.axis, keepdims=self.keep_dims)
            return self.to_tensor(xor, x.dtype)
        return loop(self, input)

    scan = interpreter._patch_builtin
    builtins: dict[object, list] = {}

    def patch_builtin(pkg, builder, scope):
        members = builtins.get(pkg)
        if members is None:
            members = builtins[pkg] = [(n, m) for n, m in inspect.getmembers(pkg) if tl.core.is_builtin(m)]
        for name, member in members:
            # Wrapped already (by the kernel launch this call runs in): wrapping it again changes nothing.
            if getattr(getattr(pkg, name, None), "_wraps", None) is member:
                continue
            interpreter._patch_attr(pkg, name, member, builder, scope)
            getattr(pkg, name)._wraps = member

    apply_impl.__wrapped__ = loop
    patch_builtin.__wrapped__ = scan
    ops.apply_impl = apply_impl
    interpreter._patch_builtin = patch_builtin
