"""``vlkernels selftest``: every op that has a GPU path, checked against its reference on this machine's device.

Run ``vlkernels selftest --device cuda`` first on a GPU machine: it checks the losses and all their gradients against
the float64 formula of open_clip's loss (fp32 and bf16), retrieval metrics and top-K against the float64 reference,
box / mask / RLE IoU and ``count_above`` against the CPU twins, ``siglip_score`` and ``l2_normalize``, on small and
medium shapes with odd and ragged sizes; then (``cuda``, without ``--quick``) it times the GPU benchmark cases beside
the installed anchors and prints each time as a percentage of the roofline MODEL's lower bound. ``--device cpu`` runs
the same checks through the CPU paths, and through every Triton kernel under ``TRITON_INTERPRET=1``.

Tolerances come from the arithmetic and from what a GPU may legally compute differently from the CPU: sums and dot
products in any order (tiles, tree reductions, atomics), with or without FMA contraction; Triton's ``tl.exp`` as
``ex2.approx``, ``tl.sqrt`` as ``sqrt.approx`` and ``/`` as ``div.full`` (the PTX Triton 3.9 emits for fp32); no TF32
(fp32 operands of ``tl.dot`` use ``input_precision="ieee"``). Each check states its bound beside it (the ``*_bound``
functions below; tests/test_selftest_bounds.py shows each one admits the legal variants and rejects a perturbed
result). Ops whose arithmetic is exact, or identical on both sides (the CUDA twins are built with ``-fmad=false``,
the CPU build with ``-ffp-contract=off``), are compared bit for bit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from vlkernels._cli_io import write_json
from vlkernels._environment import environment


@dataclass
class Check:
    op: str
    shape: str
    dtype: str
    passed: bool
    max_error: float
    tolerance: float
    seconds: float
    pct_of_limit: float | None = None
    detail: str = ""


def _err(a: torch.Tensor, e: torch.Tensor) -> float:
    a, e = a.detach().double().cpu(), e.detach().double().cpu()
    return float((a - e).abs().max()) if a.numel() else 0.0


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


# fp32's unit roundoff, and the PTX ISA's error bounds of the approximate instructions Triton emits for fp32 on
# sm_80/sm_90 (checked in the compiled PTX), rounded up to whole units.
U32 = 2.0**-24
EX2_REL = 4 * U32  # tl.exp(z) = ex2.approx(z·log2 e): 2^-22 relative; rounding z·log2 e adds |z|·u (see _exp_rel)
APPROX_REL = 4 * U32  # sqrt.approx.f32 and div.full.f32: at most 2 ulp


def gamma(n: int, u: float = U32) -> float:
    """Higham's γ_n = n·u / (1 - n·u): the relative error of a sum (or dot product) of n terms against the sum of
    their absolute values in ANY order, with or without FMA contraction: what tl.dot's K-loop, tl.sum's tree, a split
    over programs and fp32 atomics may each do."""
    return n * u / (1 - n * u)


def _exp_rel(z_max: float) -> float:
    """Relative error of ex2.approx(z·log2 e) for |z| <= z_max."""
    return EX2_REL + z_max * U32


def loss_bound(kind: str, x, y, scale: float, bias: float, upstream: float, dtype: torch.dtype) -> dict[str, float]:
    """What a GPU may legally add to the error of each loss leaf, in float64 (first order, from the formula).

    The fp32 arithmetic in any order, with or without FMA contraction, is ``vlkernels.testing.contrastive_error_bounds``
    (every rounding charged at u, whatever the order). On top of it, what the GPU kernels do differently: every exp
    is ex2.approx (η = 2^-22 plus |z|·u relative, |z| <= 2·max|logit|; SigLIP's sigmoid adds div.full's 2 ulp), which
    moves each entry of G = ∂(upstream·L)/∂logit by η·|G| and a log-sum-exp (InfoNCE) by η, a softplus by 1.5·η of
    itself (log1p(e) >= e·ln 2); and the backward GEMMs G·Y, Gᵀ·X round G to the input dtype first.
    """
    from vlkernels.testing import contrastive_error_bounds

    b = bias if kind == "siglip" else None
    base = contrastive_error_bounds(kind, x, y, scale, b, upstream=upstream)
    x, y = x.double(), y.double()
    n = x.shape[0]
    u_in = U32 if dtype == torch.float32 else _eps(dtype) / 2
    logits = scale * (x @ y.T) + (bias if kind == "siglip" else 0.0)
    eta = _exp_rel(2 * float(logits.abs().max()))
    eye = torch.eye(n, dtype=torch.float64)
    if kind == "info_nce":
        p, q = torch.softmax(logits, 1), torch.softmax(logits, 0)
        g = upstream / (2 * n) * (p + q + 2 * eye)  # >= |G| entrywise
        loss = 2 * eta
    else:
        t = torch.where(eye.bool(), -logits, logits)
        eta += APPROX_REL
        g = upstream / n * torch.sigmoid(t)
        loss = 1.5 * eta * float(torch.nn.functional.softplus(t).sum()) / n
    mag = x.abs() @ y.abs().T
    tol = {
        "loss": float(base["loss"]) + loss,
        "d_image": float((base["d image"] + scale * (eta + u_in) * (g @ y.abs())).max()),
        "d_text": float((base["d text"] + scale * (eta + u_in) * (g.T @ x.abs())).max()),
        "d_scale": float(base["d scale"]) + eta * float((g * mag).sum()),
    }
    if kind == "siglip":
        tol["d_bias"] = float(base["d bias"]) + eta * float(g.sum())
    return tol


def l2_normalize_bound(x: torch.Tensor) -> float:
    """x / ||x||: the fp32 sum of D squares in any order (γ_D, halved by the square root), sqrt.approx and div.full
    (1 / norm), the final product; times max |y| <= 1 (the output's rounding to its dtype is counted by the caller)."""
    return gamma(x.shape[1]) / 2 + 2 * APPROX_REL + U32


def siglip_score_bound(d: int, scale: float) -> float:
    """mean_f sigmoid(s·cos - b): the cosine's dot in any order and the two norms (<= 2·γ_D against |x||y|, which
    Cauchy-Schwarz bounds by the norms' product), sqrt.approx and div.full, times s and sigmoid's slope (<= 1/4); the
    sigmoid's own exp (torch's, a few ulps) and the mean's additions."""
    return scale * 0.25 * (2 * gamma(d) + 2 * APPROX_REL + 4 * U32) + 8 * U32


def _timed(device: str, fn: Callable[..., object], *args, **kwargs) -> tuple[object, float]:
    """fn(*args, **kwargs) and its wall time (device-synchronized): one cold call, compile time included."""
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def _loss_ref(kind: str, x, y, scale, bias):
    """open_clip's loss math (ClipLoss / SigLipLoss, one process), in whatever dtype its inputs have."""
    logits = scale * x @ y.T
    n = x.shape[0]
    if kind == "info_nce":
        labels = torch.arange(n, device=x.device)
        ce = torch.nn.functional.cross_entropy
        return (ce(logits, labels) + ce(logits.T, labels)) / 2
    labels = 2 * torch.eye(n, device=x.device, dtype=x.dtype) - 1
    return -torch.nn.functional.logsigmoid(labels * (logits + bias)).sum() / n


def _loss_checks(device: str, sizes: list[tuple[int, int]]) -> list[Check]:
    import vlkernels

    out = []
    fns = {"info_nce": vlkernels.info_nce_loss, "siglip": vlkernels.siglip_loss}
    g = torch.Generator().manual_seed(0)
    for n, d in sizes:
        for dtype in (torch.float32, torch.bfloat16):
            x0 = (torch.randn(n, d, generator=g) / d**0.5).to(dtype)
            y0 = (torch.randn(n, d, generator=g) / d**0.5).to(dtype)
            for kind, fn in fns.items():

                def run(dt, dev, kind=kind, fn=fn, x0=x0, y0=y0, ours=False):
                    x = x0.to(dev, dt).detach().clone().requires_grad_()
                    y = y0.to(dev, dt).detach().clone().requires_grad_()
                    s = torch.tensor(10.0, dtype=torch.float64 if dt == torch.float64 else torch.float32).to(dev)
                    b = torch.tensor(-5.0, dtype=s.dtype).to(dev).requires_grad_()
                    s.requires_grad_()
                    if ours:
                        loss = fn(x, y, s, b if kind == "siglip" else None)
                    else:
                        loss = _loss_ref(kind, x, y, s.to(dt), b.to(dt))
                    (loss * 0.37).backward()
                    grads = [x.grad, y.grad, s.grad] + ([b.grad] if kind == "siglip" else [])
                    return [loss.detach(), *grads]

                ref = run(torch.float64, "cpu")
                base = run(dtype, "cpu")
                got, secs = _timed(device, run, dtype, device, ours=True)
                gpu = loss_bound(kind, x0, y0, 10.0, -5.0, 0.37, dtype)
                leaves = ["loss", "d_image", "d_text", "d_scale", "d_bias"]
                for name, a, e, b in zip(leaves, got, ref, base):
                    # Twice the plain same-precision formula's error and a few ulps of the value (the rounding of
                    # inputs and outputs to the dtype), plus what a GPU may legally do differently (loss_bound).
                    tol = 2 * _err(b, e) + 8 * _eps(dtype) * float(e.abs().max()) + 1e-7 + gpu[name]
                    # A leaf the op gave no gradient (None) fails by name rather than stopping the run.
                    err = math.inf if a is None else _err(a, e)
                    detail = "no gradient reached this input" if a is None else ""
                    shape = f"{n}x{n}x{d}"
                    out.append(
                        Check(f"{kind}_loss {name}", shape, str(dtype)[6:], err <= tol, err, tol, secs, detail=detail)
                    )
    return out


def _int_embeddings(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    # Small integers: every product and sum is exact in fp16/fp32 accumulation, so ranks can be compared exactly.
    return torch.randint(-3, 4, (n, d), generator=g).float()


def _retrieval_checks(device: str, sizes: list[tuple[int, int, int]]) -> list[Check]:
    import numpy as np

    from vlkernels._triton import fell_back, interpreting, triton_installed, unsupported_reason
    from vlkernels.retrieval import evaluate, topk
    from vlkernels.retrieval.reference import evaluate_ref, topk_ref

    # On CPU under the interpreter, ask retrieval for its Triton kernels (its "auto" means the C++ engine on CPU).
    backend = "triton" if device == "cpu" and interpreting() and triton_installed() else "auto"
    out = []
    g = torch.Generator().manual_seed(1)
    for n_img, per, d in sizes:
        img, txt = _int_embeddings(n_img, d, g), _int_embeddings(n_img * per, d, g)
        lab = np.repeat(np.arange(n_img), per)
        ref = evaluate_ref(img, txt, lab)
        # Real-valued embeddings too: the device path screens on tensor cores and re-checks exactly, so its ranks
        # are those of the exact float64 scores (evaluate_ref's definition) on any data, not only integer-valued.
        gi = torch.randn(n_img, d, generator=g)
        gt = gi[torch.from_numpy(lab)] + 0.5 * torch.randn(n_img * per, d, generator=g)
        res, secs = _timed(device, evaluate, gi.to(device), gt.to(device), lab, backend=backend)
        ref_g = evaluate_ref(gi, gt, lab)
        err = max(abs(res[dr][k] - v) for dr in ref_g for k, v in ref_g[dr].items())
        shape = f"{n_img}img x {n_img * per}txt x {d} gaussian"
        out.append(Check("retrieval.evaluate", shape, "fp32", err <= 1e-9, err, 1e-9, secs, None, backend))
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            res, secs = _timed(device, evaluate, img.to(device, dtype), txt.to(device, dtype), lab, backend=backend)
            err = max(abs(res[dr][k] - v) for dr in ref for k, v in ref[dr].items())
            # Integer embeddings in [-3, 3]: every product and partial sum is an integer below 2^11, exact in fp16,
            # TF32 and fp32 in any order with or without FMA, so every rank is exact; 1e-9 covers only the float64
            # means of the metrics taken over the queries in another order.
            tol = 1e-9
            shape = f"{n_img}img x {n_img * per}txt x {d}"
            path = backend
            if backend == "auto" and device != "cpu":
                # Name the path auto took: Triton, or the torch fallback (unsupported device/dtype, or a failed build).
                probe = torch.empty(0, dtype=dtype).to(device)
                torch_path = unsupported_reason(probe.device, dtype) or fell_back("retrieval_count", probe)
                path = "auto (torch path)" if torch_path else "auto (triton)"
            out.append(Check("retrieval.evaluate", shape, str(dtype)[6:], err <= tol, err, tol, secs, None, path))
            k = min(7, n_img)
            (vals, idx), secs = _timed(device, topk, txt.to(device, dtype), img.to(device, dtype), k, backend=backend)
            rv, ri = topk_ref(txt, img, k)
            # Exact scores (above): values and indices equal, bit for bit.
            err = _err(vals, rv)
            same = bool(torch.equal(idx.cpu(), ri))
            out.append(Check("retrieval.topk", shape + f" k={k}", str(dtype)[6:], same and err == 0.0, err, 0.0, secs,
                             detail=path if same else "indices differ"))  # fmt: skip
    return out


def _box_checks(device: str, sizes: list[tuple[int, int]]) -> list[Check]:
    from vlkernels.boxes.reference import box_iou_ref, mask_iou_ref
    from vlkernels.ops import box_iou, mask_iou, rle_encode, rle_iou

    out = []
    g = torch.Generator().manual_seed(2)
    for n, m in sizes:
        xy = torch.rand(n + m, 2, generator=g) * 100
        boxes = torch.cat([xy, xy + torch.rand(n + m, 2, generator=g) * 50 + 0.5], 1)
        a, b = boxes[:n], boxes[n:]
        for kind in ("iou", "giou"):
            got, secs = _timed(device, box_iou, a.to(device), b.to(device), kind=kind)
            # CUDA: its CPU twin bit for bit. Both evaluate box_math.h's IEEE +, -, *, / in the same order with no
            # FMA contraction (nvcc -fmad=false, the CPU build -ffp-contract=off; the static profile shows no fma and
            # no contractible mul/add in these kernels' PTX), and nvcc's default division is IEEE (-prec-div=true).
            # CPU: the float64 formula, within a few fp32 roundings of O(1) quantities.
            ref = box_iou(a, b, kind=kind) if device == "cuda" else box_iou_ref(a.double(), b.double(), kind=kind)
            tol = 0.0 if device == "cuda" else 16 * _eps(torch.float32)
            err = _err(got, ref)
            out.append(Check(f"box_iou {kind}", f"{n}x{m}", "fp32", err <= tol, err, tol, secs))
        h, w = 23, 37
        masks = torch.rand(n + m, h, w, generator=g) < torch.rand(n + m, 1, 1, generator=g)
        ma, mb = masks[:n], masks[n:]
        got, secs = _timed(device, mask_iou, ma.to(device), mb.to(device))
        # Integer pixel counts (popcounts, integer atomics: exact in any order), then one IEEE float64 division.
        ref = mask_iou(ma, mb) if device == "cuda" else mask_iou_ref(ma, mb)
        err = _err(got, ref)
        out.append(Check("mask_iou", f"{n}x{m} {h}x{w}", "bool", err == 0.0, err, 0.0, secs))
        # Run lengths and overlaps are integers (exact in any order), then one IEEE float64 division.
        ca, cb = rle_encode(ma.to(device), compress=False), rle_encode(mb.to(device), compress=False)
        got, secs = _timed(device, rle_iou, ca, cb, [0] * m)
        if device == "cuda":
            ref = rle_iou(rle_encode(ma, compress=False), rle_encode(mb, compress=False), [0] * m)
        else:
            ref = mask_iou_ref(ma, mb)
        err = _err(torch.as_tensor(got), torch.as_tensor(ref))
        out.append(Check("rle_iou (RleCounts)", f"{n}x{m} {h}x{w}", "float64", err == 0.0, err, 0.0, secs))
    return out


def _core_metrics_checks(device: str, sizes: list[tuple[int, int]]) -> list[Check]:
    from vlkernels.core.reference import count_above_ref
    from vlkernels.metrics import siglip_score
    from vlkernels.ops import count_above, l2_normalize

    out = []
    g = torch.Generator().manual_seed(3)
    for n, d in sizes:
        scores = torch.randn(n, d, generator=g)
        thr = torch.randn(n, generator=g)
        got, secs = _timed(device, count_above, scores.to(device), thr.to(device))
        # Comparisons and integer counts: exact.
        ref = count_above(scores, thr) if device == "cuda" else count_above_ref(scores, thr)
        err = _err(got, ref)
        out.append(Check("count_above", f"{n}x{d}", "fp32", err == 0.0, err, 0.0, secs))
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            x = torch.randn(n, d, generator=g).to(dtype)
            got, secs = _timed(device, l2_normalize, x.to(device))
            e = x.double() / x.double().norm(dim=1, keepdim=True)
            # Twice plain PyTorch's error in fp32 rounded to the dtype, two ulps of |y| <= 1, and the GPU's legal
            # differences (l2_normalize_bound: any summation order, sqrt.approx, div.full).
            tol = 2 * _err(torch.nn.functional.normalize(x.float(), dim=1).to(dtype), e) + 2 * _eps(dtype)
            tol += l2_normalize_bound(x)
            err = _err(got, e)
            out.append(Check("l2_normalize", f"{n}x{d}", str(dtype)[6:], err <= tol, err, tol, secs))
            per = 3
            img = torch.randn(n * per, d, generator=g).to(dtype)
            txt = torch.randn(n, d, generator=g).to(dtype)
            got, secs = _timed(device, siglip_score, img.to(device), txt.to(device), 8.0, -2.0, frames=per)
            cos = torch.nn.functional.cosine_similarity(img.double().view(n, per, d), txt.double()[:, None], dim=2)
            e = torch.sigmoid(cos * 8.0 - 2.0).mean(1)
            # siglip_score_bound: the cosine's fp32 sums in any order and the approximate sqrt/division, through s
            # and the sigmoid's slope; 1e-6 for the float64 reference's own sigmoid and mean.
            tol = siglip_score_bound(d, 8.0) + 1e-6
            err = _err(got, e)
            out.append(Check("siglip_score", f"{n * per}frames x {d}", str(dtype)[6:], err <= tol, err, tol, secs))
    return out


def run_checks(device: str, quick: bool) -> list[Check]:
    """All correctness checks on ``device``; quick uses the small shapes only."""
    loss_sizes = [(37, 24), (17, 40)] + ([] if quick else [(257, 96), (300, 130)])
    retr_sizes = [(13, 5, 16)] + ([] if quick else [(257, 5, 64)])
    box_sizes = [(1, 1), (37, 19)] + ([] if quick else [(257, 1000)])
    cm_sizes = [(1, 5), (37, 130)] + ([] if quick else [(1000, 257), (257, 1000)])
    return (
        _loss_checks(device, loss_sizes)
        + _retrieval_checks(device, retr_sizes)
        + _box_checks(device, box_sizes)
        + _core_metrics_checks(device, cm_sizes)
    )


def run_benchmarks(quick: bool) -> list[Check]:
    """The GPU benchmark cases through the harness (CUDA only), each provider's time as % of the roofline MODEL."""
    from vlkernels import roofline
    from vlkernels._benchmarks import harness as load_harness

    harness = load_harness()
    harness.discover()
    peaks = roofline.peaks_for(torch.cuda.get_device_name())
    out = []
    for fam in sorted(harness.REGISTRY):
        for case in harness.REGISTRY[fam].values():
            if "cuda" not in case.devices:
                continue
            rows = harness.run_case(case, "cuda", quick)
            for index, row in enumerate(rows):
                name = f"{fam}/{case.name}"
                for prov, r in row["results"].items():
                    lim = roofline.limit_seconds(name, row["params"], peaks, provider=prov, index=index)
                    pct = 100.0 * lim / r["median_s"] if lim and r["median_s"] > 0 else None
                    ok = row["status"] == "ok"
                    detail = "" if ok else row["status"]
                    out.append(Check(f"bench {name} [{prov}]", str(row["params"]), "", ok, 0.0, 0.0, r["median_s"], pct,
                                     detail))  # fmt: skip
                if not row["results"]:
                    ok = row["status"] == "ok" or row["status"].startswith("skipped")
                    out.append(Check(f"bench {name}", str(row["params"]), "", ok, 0.0, 0.0, 0.0, None, row["status"]))
    return out


def format_table(checks: list[Check]) -> str:
    head = f"{'op':<34} {'shape':<24} {'dtype':<8} {'result':<6} {'max err':>10} {'tol':>10} {'time':>10}"
    head += f" {'% limit':>8}"
    lines = [head, "-" * len(head)]
    for c in checks:
        pct = f"{c.pct_of_limit:.1f}" if c.pct_of_limit is not None else "-"
        res = "pass" if c.passed else "FAIL"
        lines.append(
            f"{c.op:<34} {c.shape[:24]:<24} {c.dtype:<8} {res:<6} {c.max_error:>10.2e} {c.tolerance:>10.2e} "
            f"{c.seconds * 1e3:>8.2f}ms {pct:>8}" + (f"  {c.detail}" if c.detail else "")
        )
    return "\n".join(lines)


def main(device: str = "cpu", quick: bool = False, json_path: Path | None = None, echo=print) -> int:
    """Run the self-test; 0 when every check passes, 1 otherwise, 2 when the device is not there."""
    if device == "cuda" and not torch.cuda.is_available():
        echo("error: --device cuda but no CUDA device is visible")
        return 2
    env = environment(device)
    ver = env["versions"]
    echo(f"vlkernels selftest on {env['device_name']} | torch {ver['torch']} | triton {ver['triton']} | "
         f"backend {env['backend']}{' (TRITON_INTERPRET=1)' if env['triton_interpret'] else ''}")  # fmt: skip
    checks = run_checks(device, quick)
    if device == "cuda" and not quick:
        checks += run_benchmarks(quick=False)
    echo(format_table(checks))
    failed = [c for c in checks if not c.passed]
    echo(f"{len(checks) - len(failed)} passed, {len(failed)} failed. '% limit' = roofline MODEL lower bound / time.")
    if json_path is not None and write_json(json_path, {"environment": env, "checks": [asdict(c) for c in checks]}):
        return 2
    return 1 if failed else 0
