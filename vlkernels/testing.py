"""Comparison helpers for tests and benchmark checks (one copy, used by every family)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import torch

# fp32 kernels against an fp64 reference: tolerances for reductions of length <= ~1e4.
FP32_TOL = {"rtol": 1e-5, "atol": 1e-6}


def max_rel_error(actual: torch.Tensor, expected: torch.Tensor, floor: float = 1e-6) -> float:
    """max |a - e| / max(|e|, floor), computed in fp64."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    return float(((a - e).abs() / e.abs().clamp_min(floor)).max())


def assert_close_lowp(
    actual: torch.Tensor,
    expected_fp64: torch.Tensor,
    baseline_lowp: torch.Tensor,
    factor: float = 2.0,
    floor: float = 1e-6,
    name: str = "output",
) -> None:
    """Low-precision rule: the kernel's error against an fp64 reference is at most `factor` times the error of the
    plain PyTorch reference computed in the same low precision (plus a small absolute slack for exact baselines)."""
    if actual.shape != expected_fp64.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected_fp64.shape)}")
    err = max_rel_error(actual, expected_fp64, floor)
    base = max_rel_error(baseline_lowp, expected_fp64, floor)
    slack = 1e-3 if actual.dtype in (torch.float16, torch.bfloat16) else 1e-6
    if err > factor * base + slack:
        raise AssertionError(f"{name}: relative error {err:.3e} > {factor} x low-precision baseline error {base:.3e}")


def assert_topk_equal(
    values: torch.Tensor,
    indices: torch.Tensor,
    ref_values: torch.Tensor,
    ref_indices: torch.Tensor,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Tie-aware top-K comparison, row by row.

    Values must match (sorted descending) within tolerance. An item both lists hold must have the same score in
    both within tolerance (its position may differ inside a run of near-ties, however long the run); an item only
    one list holds must score within tolerance of the other list's last value (a near-tie at the boundary cut by K).
    """
    if values.shape != ref_values.shape or indices.shape != ref_indices.shape:
        raise AssertionError(f"shape mismatch: {tuple(values.shape)} vs {tuple(ref_values.shape)}")
    v, i = values.detach().double().cpu(), indices.detach().cpu()
    rv, ri = ref_values.detach().double().cpu(), ref_indices.detach().cpu()
    torch.testing.assert_close(v, rv, rtol=rtol, atol=atol)
    if i.dim() == 1:
        v, i, rv, ri = v[None], i[None], rv[None], ri[None]
    for row in range(v.shape[0]):
        k = v.shape[1]
        if k == 0:
            continue
        got, want = i[row].tolist(), ri[row].tolist()
        if len(set(got)) != k:
            raise AssertionError(f"row {row}: duplicate indices {got}")
        pos = {j: r for r, j in enumerate(want)}
        mine = set(got)
        for r, j in enumerate(got):
            a = float(v[row, r])
            if j in pos:
                b = float(rv[row, pos[j]])
                if abs(a - b) > atol + rtol * abs(b):
                    raise AssertionError(f"row {row}: index {j} scores {a} at rank {r}, the reference {b}")
            elif a > float(rv[row, -1]) + atol + rtol * abs(float(rv[row, -1])):
                raise AssertionError(f"row {row}: indices differ: {j} (score {a}) is not in the reference's top-{k}")
        for r, j in enumerate(want):
            b = float(rv[row, r])
            if j not in mine and b > float(v[row, -1]) + atol + rtol * abs(float(v[row, -1])):
                raise AssertionError(f"row {row}: indices differ: the reference's {j} (score {b}) is missing")


# Contrastive losses: open_clip's loss.py as the anchor, and the fp32 error bounds the losses are checked against.


def open_clip_loss_module():
    """open_clip's own ``loss.py`` loaded by path (importing the ``open_clip`` package needs torchvision and model
    code the losses do not use); None when open-clip-torch is not installed."""
    import importlib.util
    import sysconfig
    from pathlib import Path

    path = Path(sysconfig.get_paths()["purelib"]) / "open_clip" / "loss.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("open_clip_loss_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Unit roundoff of the computed (fp32) result plus that of the fp64 reference it is compared with.
UNIT_ROUNDOFF = 2.0**-24 + 2.0**-53


def contrastive_error_bounds(
    loss: str,
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor | float,
    bias: torch.Tensor | float | None = None,
    *,
    image_groups: torch.Tensor | None = None,
    text_groups: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
    upstream: float = 1.0,
    u: float = UNIT_ROUNDOFF,
) -> dict[str, torch.Tensor]:
    """First-order worst-case bounds on the absolute error of an fp32 InfoNCE (``loss="info_nce"``) or SigLIP
    (``"siglip"``) loss and its gradients, from the inputs alone (fp64 ``(N, D)``/``(M, D)`` features).

    Every rounding is charged at ``u`` times the magnitude of what it rounds, whatever the summation order (so the
    bound holds for any BLAS): a logit ``ℓ_ij = s⟨x_i, y_j⟩ + b`` is off by at most
    ``Δ_ij = (D + 4)·u·(|s|·Σ_k |x_ik y_jk| + |b|)`` (input rounding, the D-term dot, scale, bias); a softmax
    probability by ``p·(2·max_j Δ_ij + L·u)`` and a sigmoid by ``σ·(Δ_ij + 8u)``, where ``L = N + M + D + 8`` is the
    longest chain of dependent roundings of any reduction in the losses (a row of M, a column of N, a dot of D).
    The gradient ``G = ∂L/∂ℓ`` with its error ``E = δG + L·u·|G|`` then bounds ``dx`` by ``|s|·E·|y|``, ``dy`` by
    ``|s|·Eᵀ·|x|``, ``ds`` by ``Σ E∘|x||y|ᵀ`` and ``db`` by ``Σ E`` (``|G|`` of InfoNCE counts the softmax and target
    terms separately: they cancel). Returns tensors keyed ``loss``, ``d image``, ``d text``, ``d scale``,
    ``d bias`` (gradients scaled by ``upstream``).
    """
    x, y = x.double(), y.double()
    s = float(scale)
    b = 0.0 if bias is None else float(bias)
    n, d = x.shape
    m = y.shape[0]
    length = n + m + d + 8
    abs_dot = x.abs() @ y.abs().T
    logits = s * (x @ y.T) + b
    delta = (d + 4) * u * (abs(s) * abs_dot + abs(b))
    if image_groups is None:
        pos = torch.eye(n, m, dtype=torch.bool)
    else:
        pos = image_groups[:, None].cpu() == text_groups[None, :].cpu()
    if loss == "info_nce":
        eps = label_smoothing
        p_row, p_col = torch.softmax(logits, dim=1), torch.softmax(logits, dim=0)
        cnt_row, cnt_col = pos.sum(1), pos.sum(0)
        w_row, w_col = (cnt_row > 0).double(), (cnt_col > 0).double()
        q_row = (1 - eps) * pos / cnt_row.clamp_min(1)[:, None] + eps / m
        q_col = (1 - eps) * pos / cnt_col.clamp_min(1)[None, :] + eps / n
        d_row = upstream * 0.5 * w_row / w_row.sum()
        d_col = upstream * 0.5 * w_col / w_col.sum()
        rho, kappa = delta.max(dim=1).values, delta.max(dim=0).values
        g_abs = d_row[:, None] * (p_row + q_row) + d_col[None, :] * (p_col + q_col)
        err_g = d_row[:, None] * p_row * (2 * rho[:, None] + length * u)
        err_g = err_g + d_col[None, :] * p_col * (2 * kappa[None, :] + length * u)
        lse_row, lse_col = torch.logsumexp(logits, 1), torch.logsumexp(logits, 0)
        lin_row, lin_col = (q_row * logits.abs()).sum(1), (q_col * logits.abs()).sum(0)
        err_row = 2 * rho + length * u * (1 + lse_row.abs() + lin_row)
        err_col = 2 * kappa + length * u * (1 + lse_col.abs() + lin_col)
        err_loss = 0.5 * ((w_row * err_row).sum() / w_row.sum() + (w_col * err_col).sum() / w_col.sum())
    elif loss == "siglip":
        t = torch.where(pos, -logits, logits)
        sig = torch.sigmoid(t)
        g_abs = upstream * sig / n
        err_g = g_abs * (delta + 8 * u)
        err_loss = ((sig * delta).sum() + length * u * torch.nn.functional.softplus(t).sum()) / n
    else:
        raise ValueError(f"loss must be 'info_nce' or 'siglip', got {loss!r}")
    err = err_g + length * u * g_abs
    return {
        "loss": err_loss,
        "d image": abs(s) * err @ y.abs(),
        "d text": abs(s) * err.T @ x.abs(),
        "d scale": (err * abs_dot).sum(),
        "d bias": err.sum(),
    }


def assert_within_bounds(
    actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | float, name: str = "output"
) -> None:
    """|actual - expected| <= bound element-wise (bound broadcast), computed in fp64; names the worst element."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    if a.shape != e.shape:
        raise AssertionError(f"{name}: shape {tuple(a.shape)} != expected {tuple(e.shape)}")
    bound = torch.as_tensor(bound, dtype=torch.float64).cpu()
    excess = (a - e).abs() - bound
    if a.numel() and not bool((excess <= 0).all()):
        k = int(torch.nan_to_num(excess, nan=float("inf")).reshape(-1).argmax())
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), a.shape)) if a.dim() else ()
        ab = bound.expand_as(a).reshape(-1)[k] if bound.dim() else bound
        raise AssertionError(
            f"{name}: {int((~(excess <= 0)).sum())}/{a.numel()} elements outside the error bound; worst at {idx}: "
            f"got {float(a.reshape(-1)[k]):.9g}, expected {float(e.reshape(-1)[k]):.9g}, bound {float(ab):.3g}"
        )


LOSS_OUTPUTS = ("loss", "d image", "d text", "d scale", "d bias")


def contrastive_inputs(n: int, d: int, scale: float, m: int | None = None, seed: int = 0, bias: float = -5.0):
    """fp64 ``(x, y, s, b)`` for the loss tests: random directions with row norms spread over [0.5, 2] (not
    unit-norm, as the losses allow)."""
    import math

    g = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    x = torch.randn(n, d, generator=g, dtype=torch.float64) / math.sqrt(d) * (0.5 + 1.5 * torch.rand(n, 1, generator=g))
    y = torch.randn(m, d, generator=g, dtype=torch.float64) / math.sqrt(d) * (0.5 + 1.5 * torch.rand(m, 1, generator=g))
    return x, y, torch.tensor(float(scale), dtype=torch.float64), torch.tensor(bias, dtype=torch.float64)


def loss_and_grads(fn, x, y, s, b, dtype=None, device="cpu", upstream: float = 0.75, **kw) -> list[torch.Tensor]:
    """``[loss, d x, d y, d s, d b]`` of ``fn(x, y, s, b, **kw)`` with features cast to ``dtype`` (leaves in that
    dtype) and a non-unit upstream gradient (0.75: exact in every float dtype, so a low-precision loss receives it
    unrounded)."""
    feats = [t.to(device=device, dtype=dtype or t.dtype).detach().requires_grad_() for t in (x, y)]
    params = [t.to(device).detach().requires_grad_() for t in (s, b)]
    loss = fn(*feats, *params, **kw)
    loss.backward(torch.tensor(upstream, dtype=loss.dtype, device=device))
    return [loss.detach()] + [t.grad for t in (*feats, *params)]


def assert_losses_within_bounds(loss: str, actual, expected, x, y, s, b, upstream: float = 0.75, **kw) -> None:
    """Each of ``loss_and_grads``' outputs within :func:`contrastive_error_bounds` of the fp64 ``expected``."""
    bounds = contrastive_error_bounds(loss, x, y, s, b, upstream=upstream, **kw)
    for a, e, name in zip(actual, expected, LOSS_OUTPUTS):
        assert_within_bounds(a, e, bounds[name], name)


class interpreter_blas_dot:
    """Context manager: under ``TRITON_INTERPRET=1``, run fp32 ``tl.dot`` through numpy's BLAS matmul (Triton 3.9's
    interpreter uses ``np.matmul(..., dtype=...)``, numpy's non-BLAS loop, ~1000× slower); other dtypes keep the
    interpreter's own code. The same math: an fp32 product accumulated in fp32."""

    def __enter__(self):
        import importlib.util

        self._orig = None
        if importlib.util.find_spec("triton") is None:
            return self
        import numpy as np
        from triton.runtime import interpreter

        orig = self._orig = interpreter.InterpreterBuilder.create_dot

        def create_dot(builder, a, b, d, input_precision, max_num_imprecise_acc):
            if a.data.dtype == b.data.dtype == d.data.dtype == np.float32:
                return interpreter.TensorHandle(np.matmul(a.data, b.data) + d.data, d.dtype.scalar)
            return orig(builder, a, b, d, input_precision, max_num_imprecise_acc)

        interpreter.InterpreterBuilder.create_dot = create_dot
        return self

    def __exit__(self, *exc):
        if self._orig is not None:
            from triton.runtime import interpreter

            interpreter.InterpreterBuilder.create_dot = self._orig
        return False


def sigint_as_from_a_shell() -> None:
    """``preexec_fn`` of a child that a test interrupts: SIGINT at its default disposition and unblocked, as a
    user's shell starts a program. A test worker may pass it on ignored or blocked; then Python installs no
    KeyboardInterrupt handler, or never sees the signal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


_INTERRUPT_PROTOCOL = """
import time
{setup}
for _call in {calls!r}:
    print("ready", flush=True)
    t0 = time.monotonic()
    try:
        exec(_call)
        print("finished", time.monotonic() - t0, flush=True)
        break
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
        # Nothing is left behind: a call made after the interruption gives the right answer.
        print("after", bool({after}), flush=True)
"""


def check_interrupts(
    setup: str, after: str, rounds: list[tuple[str, float]], bound: float = 0.5, timeout: float = 120.0
) -> list[float]:
    """Run ``setup`` in a new interpreter, then each round's long call, sending SIGINT ``wait`` seconds into it
    (``rounds``: ``[(call, wait), ...]``). KeyboardInterrupt must reach Python within ``bound`` seconds of each
    SIGINT, and the expression ``after``, evaluated after each interruption, must be true (nothing left behind).
    One interpreter serves every round: its start and the setup are paid once, and each call runs after earlier ones
    were interrupted. Returns the latencies; fails naming every round that missed."""
    import select
    import signal
    import subprocess
    import sys
    import tempfile
    import textwrap
    import time

    # stderr to a file: a child that warns a lot between rounds cannot fill a pipe nobody reads and stall.
    err = tempfile.TemporaryFile(mode="w+")
    calls = [call for call, _ in rounds]
    script = _INTERRUPT_PROTOCOL.format(setup=textwrap.dedent(setup).strip(), calls=calls, after=after)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parent.parent,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=err,
        bufsize=0,
        preexec_fn=sigint_as_from_a_shell,
    )
    pending = b""

    def line() -> str:
        # Lines are split here, not by a buffered reader: select() must see every byte still unread. The child may
        # itself hang (a deadlock is what these tests look for): every line is awaited with a limit.
        nonlocal pending
        while b"\n" not in pending:
            if not select.select([proc.stdout], [], [], timeout)[0]:
                raise AssertionError(f"the child printed nothing within {timeout:.0f} s")
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            pending += chunk
        head, _, pending = pending.partition(b"\n")
        return head.decode().strip()

    def expect(prefix: str, what: str) -> str:
        got = line()
        if not got.startswith(prefix):
            proc.kill()
            proc.wait()
            err.seek(0)
            raise AssertionError(f"{what}: the child printed {got!r}\n{err.read()[-3000:]}")
        return got

    out = []
    try:
        for call, wait in rounds:
            expect("ready", "the child did not get ready")
            time.sleep(wait)
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            got = expect("interrupted ", f"{call!r} not interrupted {wait} s in")
            out.append(
                (float(got.split()[1]) - sent, expect("after ", "no check after the interruption") == "after True")
            )
        proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    report = [
        f"{call!r} SIGINT {wait} s in: KeyboardInterrupt {lat * 1000:.0f} ms later"
        for (call, wait), (lat, _) in zip(rounds, out)
    ]
    print("\n".join(report))
    missed = [
        line + ("" if ok else ", wrong answer after it")
        for line, (lat, ok) in zip(report, out)
        if lat >= bound or not ok
    ]
    assert not missed, f"bound {bound} s:\n" + "\n".join(missed)
    return [lat for lat, _ in out]


@contextlib.contextmanager
def clean_backend() -> Iterator[None]:
    """The backend switch as in a fresh process for the duration (no ``VLKERNELS_BACKEND``, no ``set_backend``
    override, no remembered Triton failures or warnings); the previous state is restored afterwards."""
    from vlkernels import _triton

    env = os.environ.pop("VLKERNELS_BACKEND", None)
    saved = _triton._override
    _triton._override = None
    _triton.reset_state()
    try:
        yield
    finally:
        _triton.reset_state()
        _triton._override = saved
        if env is not None:
            os.environ["VLKERNELS_BACKEND"] = env


class count_memory_traffic:
    """Context manager: under ``TRITON_INTERPRET=1``, count the bytes every Triton program loads, stores and adds
    atomically (only the lanes its mask enables, at the element size of the pointer), per program id and in total.
    The tests of ``vlkernels.roofline`` compare these counts with the model's. ``.total`` and each ``.per_program``
    value are ``{"load": bytes, "store": bytes, "atomic": bytes}``."""

    KINDS = ("load", "store", "atomic")

    def __enter__(self):
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        self.per_program: dict[tuple[int, int, int], dict[str, int]] = {}
        self.total = dict.fromkeys(self.KINDS, 0)
        self._saved = {}
        cls = type(builder)

        def add(kind, ptrs, mask):
            elem = ptrs.get_element_ty().primitive_bitwidth // 8
            n = int(mask.data.sum()) if mask is not None else ptrs.data.size
            prog = self.per_program.setdefault(tuple(builder.grid_idx), dict.fromkeys(self.KINDS, 0))
            prog[kind] += n * elem
            self.total[kind] += n * elem

        def wrap(name, kind, mask_at):
            orig = self._saved[name] = getattr(cls, name)

            def counted(b, *args):
                add(kind, args[0], args[mask_at] if mask_at is not None else None)
                return orig(b, *args)

            setattr(cls, name, counted)

        # create_load/create_store go through the masked forms; atomic_rmw(op, ptr, val, mask, sem, scope).
        wrap("create_masked_load", "load", 1)
        wrap("create_masked_store", "store", 2)
        orig_rmw = self._saved["create_atomic_rmw"] = cls.create_atomic_rmw

        def rmw(b, op, ptr, val, mask, sem, scope):
            add("atomic", ptr, mask)
            return orig_rmw(b, op, ptr, val, mask, sem, scope)

        cls.create_atomic_rmw = rmw
        return self

    def __exit__(self, *exc):
        from triton.runtime import interpreter

        cls = type(interpreter.interpreter_builder)
        for name, fn in self._saved.items():
            setattr(cls, name, fn)
        return False
