"""A roofline MODEL of every registered GPU benchmark case: the least time the task can take on a given GPU.

This is a model, not a measurement: no GPU has run these kernels here. For each case (``"family/case"`` as registered
in ``benchmarks/bench_*.py``) the work is derived from the algorithm: tensor-core FLOPs in GEMM units (one unit is
``2·N·M·D``, the product ``x·yᵀ``; InfoNCE forward + backward needs 4, SigLIP 3, per DESIGN.md; retrieval one per
direction and one for top-K, plus an epilogue), the least bytes that must cross DRAM (every input read once, every
output written once), the special-function/bit operations (``exp``/``log`` on the MUFU units, ``popc``) that run at
16 per clock per SM, and for host-streamed data the bytes over PCIe. The lower-bound time is the largest of
``flops / peak``, ``bytes / bandwidth``, ``special / rate`` and ``host bytes / link`` (perfect overlap), using the
datasheet peaks below. ``vlkernels selftest`` and the benchmark harness print a measured time as a percentage of this
limit ("% of limit").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks (dense tensor-core FLOP/s per operand class, DRAM and host-link bytes/s, 16-per-clock ops/s)."""

    name: str
    flops: dict[str, float]
    dram_bytes_per_s: float
    special_ops_per_s: float
    host_bytes_per_s: float


# H100 SXM5: 132 SMs at 1.98 GHz boost; dense (no sparsity) tensor-core rates; fp32/fp64 without tensor cores for
# "fp32"/"fp64". PCIe Gen5 x16 to the host.
H100_SXM = GpuPeaks(
    "H100 SXM",
    {"bf16": 989e12, "fp16": 989e12, "tf32": 495e12, "fp32": 67e12, "fp64": 34e12},
    3.35e12,
    132 * 16 * 1.98e9,
    64e9,
)
# A100 SXM4 80 GB: 108 SMs at 1.41 GHz; PCIe Gen4 x16.
A100_SXM = GpuPeaks(
    "A100 SXM",
    {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12, "fp64": 9.7e12},
    2.039e12,
    108 * 16 * 1.41e9,
    32e9,
)
DEVICES = {"H100 SXM": H100_SXM, "A100 SXM": A100_SXM}


@dataclass(frozen=True)
class Work:
    """What one task must do at least: FLOPs in one operand class, DRAM bytes, 16/clk/SM ops, host-link bytes."""

    what: str
    flops: float = 0.0
    flop_class: str = "fp32"
    dram_bytes: float = 0.0
    special_ops: float = 0.0
    host_bytes: float = 0.0
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def seconds(self, gpu: GpuPeaks) -> float:
        return max(
            self.flops / gpu.flops[self.flop_class],
            self.dram_bytes / gpu.dram_bytes_per_s,
            self.special_ops / gpu.special_ops_per_s,
            self.host_bytes / gpu.host_bytes_per_s,
        )

    def bound(self, gpu: GpuPeaks) -> str:
        terms = {
            f"{self.flop_class} tensor" if self.flop_class in ("bf16", "fp16", "tf32") else self.flop_class: (
                self.flops / gpu.flops[self.flop_class]
            ),
            "DRAM": self.dram_bytes / gpu.dram_bytes_per_s,
            "MUFU/POPC": self.special_ops / gpu.special_ops_per_s,
            "PCIe": self.host_bytes / gpu.host_bytes_per_s,
        }
        return max(terms, key=lambda k: terms[k])


def gemm_unit(n: int, m: int, d: int) -> float:
    return 2.0 * n * m * d


def _loss(n: int, d: int) -> list[dict[str, Work]]:
    units = gemm_unit(n, n, d)
    io = 4.0 * n * d * 2  # bf16 x, y read once; dx, dy written once
    clip = Work("InfoNCE fwd+bwd, bf16", 4 * units, "bf16", io, 4.0 * n * n, notes="4 GEMM units; 4 exp per logit")
    sig = Work("SigLIP fwd+bwd, bf16", 3 * units, "bf16", io, 2.0 * n * n, notes="3 GEMM units; exp + log1p per logit")
    gemm = Work("one bf16 GEMM x·yᵀ", units, "bf16", 2.0 * n * d * 2 + 2.0 * n * n, notes="1 unit, N×N bf16 output")
    return [{"*": clip}, {"*": sig}, {"*": gemm}]


def _retrieval_1m(n: int, d: int) -> list[dict[str, Work]]:
    units = gemm_unit(n, n, d)
    io = 2.0 * n * d * 2
    task = Work("exact metrics both directions + top-10, fp16", 3 * units, "fp16", io,
                notes="2 counting GEMMs (one per direction) + 1 top-K GEMM; epilogue compares only")  # fmt: skip
    gemm = Work("the same-shape fp16 GEMM (chunked output)", units, "fp16", io + 2.0 * n * n, notes="1 unit")
    # faiss GpuIndexFlatIP searches float32 vectors: one fp32 GEMM (tf32 off) plus its k-selection.
    faiss = Work("faiss GpuIndexFlatIP top-10, fp32", units, "fp32", 2.0 * n * d * 4, notes="1 fp32 unit")
    return [{"*": task, "cublas_gemm": gemm, "faiss_gpu": faiss}]


def _retrieval_host(n: int, d: int, chunk: int) -> list[dict[str, Work]]:
    units = gemm_unit(n, n, d)
    resident = Work("exact metrics both directions, fp16, resident", 2 * units, "fp16", 2.0 * n * d * 2)
    streamed = Work("exact metrics both directions, texts streamed from host", 2 * units, "fp16", 2.0 * n * d * 2,
                    host_bytes=n * d * 2.0, notes="texts cross PCIe at least once")  # fmt: skip
    return [{"*": resident, "streamed": streamed}]


def _box_iou(n: int, m: int) -> list[dict[str, Work]]:
    return [{"*": Work("pairwise box IoU, fp32", 12.0 * n * m, "fp32", (n + m) * 16.0 + n * m * 4.0,
                       notes="N×M fp32 output written once")}]  # fmt: skip


def _rle_iou_counts(n: int, m: int, h: int, w: int) -> list[dict[str, Work]]:
    # The run lengths depend on the masks, not on the parameters: the floor counts the float64 output only.
    return [{"*": Work("RLE IoU, float64 out", 0.0, "fp64", n * m * 8.0, notes="loose floor: output bytes only")}]


def _rle_encode(n: int, h: int, w: int) -> list[dict[str, Work]]:
    return [{"*": Work("RLE encode of bool masks", 0.0, "fp32", float(n * h * w), notes="masks read once")}]


def _mask_iou(n: int, m: int, h: int, w: int) -> list[dict[str, Work]]:
    # Packed to bits, every pair ANDs and popcounts h·w/32 words.
    return [{"*": Work("dense mask IoU", 0.0, "fp32", (n + m) * h * w + n * m * 4.0, n * m * h * w / 32.0,
                       notes="masks read once; one popc per 32 pixels per pair")}]  # fmt: skip


def _count_above(n: int, m: int) -> list[dict[str, Work]]:
    return [{"*": Work("count_above, fp32 scores", 0.0, "fp32", n * m * 4.0 + n * 12.0, notes="scores read once")}]


def _siglip_score(n_frames: int, per_caption: int, d: int) -> list[dict[str, Work]]:
    m = n_frames // per_caption
    w = Work("SigLIP score, fp16 embeddings", 6.0 * n_frames * d, "fp32", (n_frames + m) * d * 2.0 + n_frames * 4.0,
             notes="each embedding read once")  # fmt: skip
    return [{"*": w}, {"*": w}]


def _visdial(rounds: int, c: int) -> list[dict[str, Work]]:
    return [{"*": Work("VisDial ranks, float64 scores", 0.0, "fp64", rounds * c * 8.0, notes="scores read once")}]


MODELS = {
    "contrastive/loss_gpu": _loss,
    "retrieval/gpu_1m": _retrieval_1m,
    "retrieval/gpu_host_stream": _retrieval_host,
    "boxes/box_iou": _box_iou,
    "boxes/rle_iou_counts": _rle_iou_counts,
    # Every mask layout of the encoder reads each mask byte once.
    "boxes/rle_encode": _rle_encode,
    "boxes/rle_encode_nhw_uint8": _rle_encode,
    "boxes/rle_encode_fortran_uint8": _rle_encode,
    "boxes/rle_encode_fortran_bool": _rle_encode,
    "boxes/mask_iou": _mask_iou,
    "core/count_above": _count_above,
    "metrics/siglip_score": _siglip_score,
    "metrics/visdial_ranks": _visdial,
}


def work(case: str, params: dict, provider: str | None = None, index: int = 0) -> Work | None:
    """The modelled work of bench ``index`` of ``case`` (``"family/name"``) at ``params``, for ``provider`` (a provider
    that does different work than the task, e.g. the bare GEMM, has its own entry); None for an unmodelled case."""
    fn = MODELS.get(case)
    if fn is None:
        return None
    benches = fn(**params)
    if not 0 <= index < len(benches):
        return None
    per = benches[index]
    return per.get(provider, per["*"]) if provider is not None else per["*"]


def peaks_for(device_name: str | None) -> GpuPeaks:
    """The peaks table for a ``torch.cuda.get_device_name()`` string: A100 when it names one, else H100 SXM."""
    return A100_SXM if device_name and "A100" in device_name else H100_SXM


def limit_seconds(
    case: str, params: dict, device: str | GpuPeaks = "H100 SXM", provider: str | None = None, index: int = 0
) -> float | None:
    """MODEL lower-bound seconds for bench ``index`` of ``case`` at ``params`` on ``device`` (a ``DEVICES`` key, a
    GPU name, or ``GpuPeaks``); None when the case has no model. ``% of limit = 100 · limit / measured``."""
    w = work(case, params, provider, index)
    if w is None:
        return None
    gpu = device if isinstance(device, GpuPeaks) else DEVICES.get(device) or peaks_for(device)
    return w.seconds(gpu)


# The GPU cases of the docs' table, at the sizes the issue names (DESIGN.md's targets).
DOC_CASES = (
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 1, "SigLIP B=65536 D=768 bf16"),
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 0, "InfoNCE B=65536 D=768 bf16"),
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 2, "one GEMM 65536×65536×768 bf16"),
    ("retrieval/gpu_1m", {"n": 1_000_000, "d": 512}, 0, "retrieval 1M×1M D=512 fp16, metrics + top-10"),
    ("boxes/box_iou", {"n": 4000, "m": 4000}, 0, "box IoU 4000×4000 fp32"),
)


def table() -> str:
    """Markdown table of the DOC_CASES on H100 SXM and A100 SXM (a MODEL)."""
    lines = [
        "| case (MODEL) | TFLOP | GB moved | H100 SXM limit | bound | A100 SXM limit | bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, params, index, label in DOC_CASES:
        w = work(case, params, None, index)
        h, a = w.seconds(H100_SXM), w.seconds(A100_SXM)
        lines.append(
            f"| {label} | {w.flops / 1e12:.1f} | {w.dram_bytes / 1e9:.3f} | {_fmt(h)} | {w.bound(H100_SXM)} | "
            f"{_fmt(a)} | {w.bound(A100_SXM)} |"
        )
    return "\n".join(lines)


def _fmt(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} µs"


if __name__ == "__main__":
    print(table())
