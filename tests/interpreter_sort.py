"""Makes tl.sort under TRITON_INTERPRET=1 cost numpy calls instead of a Python loop over every element.

Triton 3.9's interpreter reduces with numpy for sum, min, max and argmin/argmax, but falls back to a Python loop per
element for any other combine function; tl.sort's compare-and-swap is built on ``xor_sum`` (an XOR reduction), so an
interpreted sort of a (32, 64) block costs about a second. ``install`` gives the XOR reduction numpy's
``bitwise_xor.reduce``, the interpreter's own path for sums: exact on integers, the same result in any order. The
kernels' code still runs interpreted, sort network and all. The test process installs it (tests/conftest.py), and so
does every gloo rank (tests/gloo_ranks.py)."""


def install() -> None:
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return
    ops = interpreter.ReduceOps
    if getattr(ops.apply_impl, "_numpy_xor", False):
        return
    loop = ops.apply_impl

    def apply_impl(self, input):
        if self.combine_fn is tl.standard._xor_combine:
            x = input[0]
            return self.to_tensor(
                np.bitwise_xor.reduce(x.handle.data, axis=self.axis, keepdims=self.keep_dims), x.dtype
            )
        return loop(self, input)

    apply_impl._numpy_xor = True
    apply_impl.__wrapped__ = loop
    ops.apply_impl = apply_impl
