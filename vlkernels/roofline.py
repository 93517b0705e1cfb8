"""A roofline MODEL of every Triton kernel and every registered GPU benchmark case: the least time each can take.

This is a model, not a measurement: no GPU has run these kernels here. A kernel's work has four parts:

- tensor-core (or FMA) FLOPs, in GEMM units (one unit is ``2·N·M·D``, the product ``x·yᵀ``);
- **L2 traffic**: every byte its programs load, store or add atomically, counted from the kernel's loop structure
  (``*_traffic`` below: both operands of every recomputed tile, the read-modify-write of fp32 accumulator rows, the
  atomics). Tile loads are pipelined ``cp.async.cg`` copies that bypass L1, so each of these bytes crosses the
  L2-to-SM path. The tests count the same bytes in an instrumented interpreter run
  (``vlkernels.testing.count_memory_traffic``) and require equality;
- **DRAM traffic**: inputs read and outputs written once, plus what the tile order cannot keep in L2: a swept
  operand larger than L2 is streamed again by every wave of resident programs, and of the accumulator rows (plain or
  atomic) that the resident programs keep in flight, the share beyond the L2 capacity goes to DRAM on every
  read-modify-write;
- special-function/bit operations (``exp``/``log`` on the MUFU units, ``popc``) at 16 per clock per SM, and for
  host-streamed data the bytes over PCIe.

A kernel's lower-bound time is the largest of the four (perfect overlap) and its **bound** names the largest term
(tensor FLOPs, L2, DRAM, MUFU/POPC, PCIe); a benchmark case runs its kernels one after another, so its limit is the
sum of theirs. Peaks are datasheet figures (below); the L2 bandwidth is the A100 whitepaper's 5120 bytes per clock
at each GPU's boost clock, an assumption for H100, whose whitepaper gives no figure. ``vlkernels selftest`` and the
benchmark harness print a measured time as a percentage of a case's limit ("% of limit").
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks (dense tensor-core FLOP/s per operand class, DRAM, L2 and host-link bytes/s, 16-per-clock
    ops/s), the L2 capacity, the number of SMs and the compute capability whose launch tiles it runs."""

    name: str
    flops: dict[str, float]
    dram_bytes_per_s: float
    special_ops_per_s: float
    host_bytes_per_s: float
    l2_bytes_per_s: float
    l2_bytes: float
    sms: int
    arch: int


# H100 SXM5: 132 SMs at 1.98 GHz boost, 50 MB L2; dense (no sparsity) tensor-core rates; fp32/fp64 without tensor
# cores for "fp32"/"fp64". PCIe Gen5 x16 to the host.
H100_SXM = GpuPeaks(
    "H100 SXM",
    {"bf16": 989e12, "fp16": 989e12, "tf32": 495e12, "fp32": 67e12, "fp64": 34e12},
    3.35e12,
    132 * 16 * 1.98e9,
    64e9,
    5120 * 1.98e9,
    50e6,
    132,
    90,
)
# A100 SXM4 80 GB: 108 SMs at 1.41 GHz, 40 MB L2; PCIe Gen4 x16.
A100_SXM = GpuPeaks(
    "A100 SXM",
    {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12, "fp64": 9.7e12},
    2.039e12,
    108 * 16 * 1.41e9,
    32e9,
    5120 * 1.41e9,
    40e6,
    108,
    80,
)
DEVICES = {"H100 SXM": H100_SXM, "A100 SXM": A100_SXM}
TENSOR_CLASSES = ("bf16", "fp16", "tf32")


@dataclass(frozen=True)
class Work:
    """What one kernel (or, with ``parts``, a sequence of kernels) must do at least: FLOPs in one operand class,
    DRAM bytes, L2 bytes, 16/clk/SM ops, host-link bytes."""

    what: str
    flops: float = 0.0
    flop_class: str = "fp32"
    dram_bytes: float = 0.0
    special_ops: float = 0.0
    host_bytes: float = 0.0
    l2_bytes: float = 0.0
    notes: str = ""
    parts: tuple[Work, ...] = ()
    extra: dict = field(default_factory=dict)

    def terms(self, gpu: GpuPeaks) -> dict[str, float]:
        """Seconds per bound of this kernel alone (a sequence: the sum over its parts, per bound)."""
        if self.parts:
            out: dict[str, float] = defaultdict(float)
            for p in self.parts:
                for k, v in p.terms(gpu).items():
                    out[k] += v
            return dict(out)
        compute = f"{self.flop_class} tensor" if self.flop_class in TENSOR_CLASSES else self.flop_class
        return {
            compute: self.flops / gpu.flops[self.flop_class],
            "L2": self.l2_bytes / gpu.l2_bytes_per_s,
            "DRAM": self.dram_bytes / gpu.dram_bytes_per_s,
            "MUFU/POPC": self.special_ops / gpu.special_ops_per_s,
            "PCIe": self.host_bytes / gpu.host_bytes_per_s,
        }

    def seconds(self, gpu: GpuPeaks) -> float:
        if self.parts:
            return sum(p.seconds(gpu) for p in self.parts)
        return max(self.terms(gpu).values())

    def bound(self, gpu: GpuPeaks) -> str:
        """The term that limits: a kernel's largest; for a sequence, the bound that limits the most time."""
        if not self.parts:
            terms = self.terms(gpu)
            return max(terms, key=lambda k: terms[k])
        share: dict[str, float] = defaultdict(float)
        for p in self.parts:
            share[p.bound(gpu)] += p.seconds(gpu)
        return max(share, key=lambda k: share[k])


def gemm_unit(n: int, m: int, d: int) -> float:
    return 2.0 * n * m * d


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Traffic:
    """Bytes the programs of one launch load, store and add atomically (masked-off lanes move nothing)."""

    load: float = 0.0
    store: float = 0.0
    atomic: float = 0.0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.load + other.load, self.store + other.store, self.atomic + other.atomic)

    @property
    def total(self) -> float:
        return self.load + self.store + self.atomic

    def as_dict(self) -> dict[str, float]:
        return {"load": self.load, "store": self.store, "atomic": self.atomic}


def _tile_operands(n: int, m: int, d: int, elem: int, block_m: int, block_n: int) -> float:
    # Every [BM, BN] tile of a·bᵀ loads its valid rows of a and of b over all of D: summed over the tiles, every a
    # row once per column tile and every b row once per row block.
    return (n * _cdiv(m, block_n) + m * _cdiv(n, block_m)) * d * elem


# Contrastive kernels (vlkernels/contrastive/kernels.py). elem: bytes per feature element.
def lse_pair_fwd_traffic(n: int, m: int, d: int, elem: int, block_m: int, block_n: int, programs: int) -> Traffic:
    """``_lse_pair_fwd_kernel``: per program the scale; per tile its operands and the fp32 (max, sum) column
    scratch read and written; per row block the row lse and the diagonal logit."""
    scratch = 8.0 * m * _cdiv(n, block_m)
    return Traffic(4.0 * programs + _tile_operands(n, m, d, elem, block_m, block_n) + scratch, scratch + 8.0 * n)


def grad_sweep_traffic(
    n: int,
    m: int,
    d: int,
    elem: int,
    block_m: int,
    block_n: int,
    *,
    loss: str = "info_nce",
    acc_a: bool = True,
    acc_b: bool = False,
    write_ds: bool = False,
    write_loss: bool = False,
    write_gsum: bool = False,
    groups: bool = False,
    bias: bool = False,
    group_n: int = 1,
) -> Traffic:
    """``_grad_sweep_kernel`` over the tiles of a (n, d) · b (m, d)ᵀ. Per program the scale; per tile its operands
    and the gradient tile's per-row and per-column vectors (InfoNCE: lse and upstream gradient, fp32, and per row the
    positives' gradient; SigLIP: int64 group ids when given, the bias when given); ``acc_a``: b's rows again for
    ``G·b`` and, once per ``group_n`` column tiles, the program's fp32 accumulator rows read and written; ``acc_b``:
    a's rows again for ``Gᵀ·a`` and its fp32 atomics into b's rows; at the end the per-row fp32 outputs."""
    tm, tn = _cdiv(n, block_m), _cdiv(m, block_n)
    rows_x_tiles, cols_x_tiles = n * tn, m * tm
    load = 4.0 * tm + _tile_operands(n, m, d, elem, block_m, block_n)
    if loss == "info_nce" or groups:
        load += 8.0 * (rows_x_tiles + cols_x_tiles)
    if loss == "info_nce":
        load += 4.0 * rows_x_tiles  # the positives' gradient, one fp32 per row
    if loss != "info_nce" and bias:
        load += 4.0 * tm * tn
    store = 4.0 * n * (write_ds + write_loss + write_gsum)
    atomic = 0.0
    if acc_a:
        rmw = 4.0 * n * _cdiv(tn, group_n) * d
        load += cols_x_tiles * d * elem + rmw
        store += rmw
    if acc_b:
        load += rows_x_tiles * d * elem
        atomic += 4.0 * cols_x_tiles * d
    return Traffic(load, store, atomic)


# Retrieval kernels (vlkernels/retrieval/kernels.py), modelled from their launchers (triton_screen.py) and tiles
# (configs.py). elem: bytes per screen operand element (bf16 halves of fp32 inputs, fp16/bf16 inputs as they are);
# split: fp32 inputs as two halves (both halves of each operand loaded, three dots). Which tiles hold undecided pairs
# or top-k candidates depends on the data: ``tiles`` (appended mask tiles) and ``pairs`` (exact re-checks) are
# inputs of the model, not outputs.
def exact_score_traffic(pairs: int, d: int, elem: int) -> Traffic:
    """``_exact_score_kernel``: per pair its two int64 indices, the query and gallery rows over all of D (the
    exact operands, ``elem`` bytes each) and the float64 score written."""
    return Traffic(pairs * (16.0 + 2.0 * d * elem), 8.0 * pairs)


def _screen_tiles_traffic(n_q: int, n_g: int, d: int, elem: int, block_m: int, block_n: int, split: bool) -> float:
    # _screen_block (dot_tile + _screen_interval) over every (row block, column tile): each tile loads its valid query
    # and gallery rows (one or two halves) over all of D and 5 fp32 bound statistics per valid row and column. Splits
    # hold whole column tiles (cols_per_split is a multiple of block_n), so the tiles are those of the whole gallery.
    return (n_q * _cdiv(n_g, block_n) + n_g * _cdiv(n_q, block_m)) * ((1 + split) * d * elem + 20.0)


def _appended(tiles: int, block_m: int, block_n: int) -> Traffic:
    # _append_tile: per tile holding a set entry, one int64 counter atomic, its int64 position and its int8 mask.
    return Traffic(0.0, tiles * (8.0 + block_m * block_n), 8.0 * tiles)


def rank_screen_traffic(
    n_q: int, n_g: int, d: int, elem: int, block_m: int, block_n: int, slots: int, cols_per_split: int,
    split: bool, tiles: int = 0,
) -> Traffic:  # fmt: skip
    """``_rank_screen_kernel`` (grid: query blocks × gallery splits): per program the fp32 thresholds (up, down) and
    int64 positives of its SLOTS slots, per tile the screen, ``tiles`` undecided mask tiles appended, and the int64
    counts added atomically."""
    per_slot = _cdiv(n_g, cols_per_split) * n_q * slots
    screen = _screen_tiles_traffic(n_q, n_g, d, elem, block_m, block_n, split)
    return Traffic(16.0 * per_slot + screen, 0.0, 8.0 * per_slot) + _appended(tiles, block_m, block_n)


def topk_bound_traffic(
    n_q: int, n_g: int, d: int, elem: int, block_m: int, block_n: int, cols_per_split: int, split: bool
) -> Traffic:
    """``_topk_bound_kernel`` (grid: query blocks × gallery splits): the screen of its tiles and BLOCK_N int64 keys
    stored per query and split."""
    screen = _screen_tiles_traffic(n_q, n_g, d, elem, block_m, block_n, split)
    return Traffic(screen, _cdiv(n_g, cols_per_split) * n_q * block_n * 8.0)


def topk_collect_traffic(
    n_q: int, n_g: int, d: int, elem: int, block_m: int, block_n: int, cols_per_split: int, split: bool,
    tiles: int = 0,
) -> Traffic:  # fmt: skip
    """``_topk_collect_kernel`` (grid: query blocks × gallery splits): per program the fp32 limit of its queries,
    the screen of its tiles and ``tiles`` candidate mask tiles appended."""
    screen = _screen_tiles_traffic(n_q, n_g, d, elem, block_m, block_n, split)
    load = _cdiv(n_g, cols_per_split) * n_q * 4.0 + screen
    return Traffic(load) + _appended(tiles, block_m, block_n)


def bound_tile_traffic(n_q: int, n_g: int, d: int, elem: int, block_m: int, block_n: int, split: bool) -> Traffic:
    """``_bound_tile_kernel`` (grid: query blocks × column tiles): the screen of its tile and the fp32 lower bound of
    every valid pair stored."""
    return Traffic(_screen_tiles_traffic(n_q, n_g, d, elem, block_m, block_n, split), 4.0 * n_q * n_g)


def _waves(row_blocks: int, gpu: GpuPeaks, blocks_per_sm: int) -> int:
    return _cdiv(row_blocks, gpu.sms * blocks_per_sm)


def _streamed(operand_bytes: float, waves: int, gpu: GpuPeaks) -> float:
    # Resident programs sweep the operand together (a sliding window of tiles): it is read once per wave from DRAM
    # unless all of it stays in L2.
    return operand_bytes if operand_bytes <= gpu.l2_bytes else operand_bytes * waves


def sweep_work(
    what: str,
    n: int,
    m: int,
    d: int,
    dtype: str,
    tiles: tuple[int, int],
    gpu: GpuPeaks,
    *,
    kernel: str = "sweep",
    blocks_per_sm: int = 1,
    programs: int | None = None,
    special_per_logit: float = 2.0,
    **flags,
) -> Work:
    """The modelled work of one contrastive launch at GPU scale: ``kernel`` "fwd" (``_lse_pair_fwd_kernel``) or
    "sweep" (``_grad_sweep_kernel`` with ``flags`` as ``grad_sweep_traffic``), tiles (BLOCK_M, BLOCK_N)."""
    elem = 4 if dtype == "fp32" else 2
    bm, bn = tiles
    row_blocks = _cdiv(n, bm)
    waves = _waves(row_blocks, gpu, blocks_per_sm)
    unit = gemm_unit(n, m, d)
    resident_rows = min(n, gpu.sms * blocks_per_sm * bm)
    if kernel == "fwd":
        progs = programs or min(row_blocks, gpu.sms)
        traffic = lse_pair_fwd_traffic(n, m, d, elem, bm, bn, progs)
        dram = n * d * elem + _streamed(m * d * elem, waves, gpu) + 8.0 * progs * m + 8.0 * n
        return Work(what, unit, dtype, dram, special_per_logit * n * m, l2_bytes=traffic.total,
                    extra={"traffic": traffic})  # fmt: skip
    traffic = grad_sweep_traffic(n, m, d, elem, bm, bn, **flags)
    acc_a, acc_b = flags.get("acc_a", True), flags.get("acc_b", False)
    dram = n * d * elem + _streamed(m * d * elem, waves, gpu) + 4.0 * n
    # Accumulators: the resident programs' own fp32 rows (plain read-modify-write, once per column group) and the
    # atomics' window of b rows. Between two visits of a row every other resident program visits its own, so the
    # share of that working set beyond L2 misses on every visit (an LRU-like cache, smoothed proportionally).
    working = resident_rows * d * 4.0 * acc_a + min(m, gpu.sms * blocks_per_sm * bn) * d * 4.0 * acc_b
    miss = max(0.0, 1.0 - gpu.l2_bytes / working) if working else 0.0
    if acc_a:
        dram += 4.0 * n * d + miss * 8.0 * n * _cdiv(_cdiv(m, bn), flags.get("group_n", 1)) * d
    if acc_b:
        dram += 2.0 * _streamed(4.0 * m * d, waves, gpu) + miss * 2.0 * traffic.atomic
    units = 1 + acc_a + acc_b
    return Work(what, units * unit, dtype, dram, special_per_logit * n * m, l2_bytes=traffic.total,
                extra={"traffic": traffic})  # fmt: skip


# The CUDA launch tiles of the GPU's compute capability (contrastive/configs.py).
def _contrastive_tiles(kind: str, dtype: str, arch: int):
    from vlkernels.contrastive.configs import CUDA

    return CUDA[(arch, dtype)][kind]


def info_nce_kernels(n: int, m: int, d: int, dtype: str, gpu: GpuPeaks, deterministic: bool = False) -> list[Work]:
    """InfoNCE forward + backward as launched on CUDA: the lse_pair forward, then one dual sweep (atomics) or two
    sweeps (deterministic)."""
    f = _contrastive_tiles("fwd", dtype, gpu.arch)
    parts = [sweep_work("lse_pair fwd", n, m, d, dtype, (f.block_m, f.block_n), gpu, kernel="fwd")]
    if deterministic:
        t = _contrastive_tiles("info_nce_sweep", dtype, gpu.arch)
        g = dict(group_n=t.group_n)
        parts.append(sweep_work("InfoNCE sweep x (dx, ds)", n, m, d, dtype, (t.block_m, t.block_n), gpu,
                                write_ds=True, **g))  # fmt: skip
        parts.append(sweep_work("InfoNCE sweep y (dy)", m, n, d, dtype, (t.block_m, t.block_n), gpu, **g))
    else:
        t = _contrastive_tiles("info_nce_dual", dtype, gpu.arch)
        parts.append(sweep_work("InfoNCE dual sweep (dx, dy by atomics, ds)", n, m, d, dtype, (t.block_m, t.block_n),
                                gpu, acc_b=True, write_ds=True, group_n=t.group_n))  # fmt: skip
    return parts


def siglip_kernels(n: int, m: int, d: int, dtype: str, gpu: GpuPeaks, deterministic: bool = False) -> list[Work]:
    """SigLIP loss + gradients as launched on CUDA (bias, no groups): one dual sweep with the loss, or two sweeps."""
    flags = dict(loss="siglip", bias=True, write_ds=True, write_loss=True, write_gsum=True)
    if deterministic:
        t = _contrastive_tiles("sweep", dtype, gpu.arch)
        tiles = (t.block_m, t.block_n)
        return [
            sweep_work("SigLIP sweep x (loss, dx, ds, db)", n, m, d, dtype, tiles, gpu, group_n=t.group_n, **flags),
            sweep_work("SigLIP sweep y (dy)", m, n, d, dtype, tiles, gpu, loss="siglip", bias=True, group_n=t.group_n),
        ]
    t = _contrastive_tiles("dual", dtype, gpu.arch)
    return [sweep_work("SigLIP dual sweep (loss, dx, dy by atomics, ds, db)", n, m, d, dtype, (t.block_m, t.block_n),
                       gpu, acc_b=True, group_n=t.group_n, **flags)]  # fmt: skip


def _sequence(what: str, parts: list[Work], notes: str = "") -> Work:
    return Work(
        what,
        sum(p.flops for p in parts),
        parts[0].flop_class,
        sum(p.dram_bytes for p in parts),
        sum(p.special_ops for p in parts),
        sum(p.host_bytes for p in parts),
        sum(p.l2_bytes for p in parts),
        notes,
        tuple(parts),
    )


def _loss(n: int, d: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    units = gemm_unit(n, n, d)
    clip = _sequence("InfoNCE fwd+bwd, bf16", info_nce_kernels(n, n, d, "bf16", gpu), "atomic path: 4 GEMM units")
    clip_det = _sequence("InfoNCE fwd+bwd, bf16, deterministic", info_nce_kernels(n, n, d, "bf16", gpu, True),
                         "5 GEMM units")  # fmt: skip
    sig = _sequence("SigLIP fwd+bwd, bf16", siglip_kernels(n, n, d, "bf16", gpu), "atomic path: 3 GEMM units")
    sig_det = _sequence("SigLIP fwd+bwd, bf16, deterministic", siglip_kernels(n, n, d, "bf16", gpu, True), "4 units")
    io = 4.0 * n * d * 2
    # open_clip materializes the N×N logits (bf16) and its softmax/gradient; cuBLAS's own tiles are not modelled
    # (compulsory bytes only).
    oc_clip = Work("open_clip ClipLoss, bf16", 4 * units, "bf16", io + 6.0 * n * n * 2, 4.0 * n * n)
    oc_sig = Work("open_clip SigLipLoss, bf16", 3 * units, "bf16", io + 6.0 * n * n * 2, 2.0 * n * n)
    gemm = Work("one bf16 GEMM x·yᵀ", units, "bf16", 2.0 * n * d * 2 + 2.0 * n * n, notes="1 unit, N×N bf16 output")
    return [
        {"*": clip, "vlkernels_deterministic": clip_det, "open_clip": oc_clip},
        {"*": sig, "vlkernels_deterministic": sig_det, "open_clip": oc_sig},
        {"*": gemm},
    ]


def _retrieval_tiles(kind: str, arch: int, kk: int):
    """(screen tile, fused top-K tile with its BLOCK_N for k + exclusions = kk or None past the fused budget, exact
    tile) as retrieval/configs.py gives them on CUDA."""
    from vlkernels.retrieval import configs as rc

    pow2 = max(16, 1 << (kk - 1).bit_length())
    fits = [b for b in rc.TOPK_BLOCK_NS[kind] if b >= pow2]
    topk = dataclasses.replace(rc.TOPK_TILES[(arch, kind)], block_n=min(fits)) if kk <= rc.MAX_FUSED_K else None
    return rc.SCREEN_TILES[(arch, kind)], topk, rc.EXACT_TILE


def _cols_per_split(n_g: int, n_q: int, block_m: int, block_n: int, gpu: GpuPeaks) -> int:
    # retrieval.triton_screen._splits on CUDA: enough gallery splits to give every SM two programs.
    splits = max(1, min(_cdiv(n_g, block_n), _cdiv(2 * gpu.sms, max(1, _cdiv(n_q, block_m)))))
    return _cdiv(_cdiv(n_g, splits), block_n) * block_n


def retrieval_kernels(n_q: int, n_g: int, d: int, dtype: str, gpu: GpuPeaks, k: int = 10) -> list[Work]:
    """Exact metrics of one direction (one positive per query: its exact ground-truth score, then the rank screen)
    and the two-pass top-k (pass A: best lower bounds, fused top-K or dense bound tiles; pass B: the candidates;
    then their exact scores), as launched on CUDA for ``dtype`` inputs (configs.py tiles of the GPU's arch).

    The undecided pairs of the rank screen depend on the data: none in this floor (each one adds a mask tile and an
    exact score). Pass B appends at least k candidates per query, at least ceil(k / BLOCK_N) tiles per row block,
    and re-checks them exactly: the floor. Not modelled: torch.topk over pass A's keys, the operands' screen halves
    and statistics (elementwise torch), and the relaunch of an overflowed tile buffer."""
    split = dtype in ("fp32", "fp64")
    kind = "fp32" if split else dtype
    s, tk, _ = _retrieval_tiles(kind, gpu.arch, k)
    raw, elem = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}[dtype], 2
    dots = 3 if split else 1
    flop_class = "bf16" if split else dtype
    unit = dots * gemm_unit(n_q, n_g, d)

    def exact(what: str, pairs: int) -> Work:
        t = exact_score_traffic(pairs, d, raw)
        # Gathered rows: every pair's query and gallery row once from DRAM (a floor: a row shared by pairs may hit L2).
        return Work(what, 2.0 * pairs * d, "fp64", t.total, l2_bytes=t.total, extra={"traffic": t})

    def streamed(bm: int, bn: int) -> float:
        # Both operands' halves and statistics (n, 8 fp32: one 32-byte sector per row) read from DRAM, the gallery
        # once per wave of resident programs when it does not fit in L2.
        per = _cols_per_split(n_g, n_q, bm, bn, gpu)
        waves = _waves(_cdiv(n_q, bm) * _cdiv(n_g, per), gpu, 1)
        return n_q * (d * elem * (1 + split) + 32.0) + _streamed(n_g * (d * elem * (1 + split) + 32.0), waves, gpu)

    per = _cols_per_split(n_g, n_q, s.block_m, s.block_n, gpu)
    rank = rank_screen_traffic(n_q, n_g, d, elem, s.block_m, s.block_n, 1, per, split)
    # Thresholds and positives read, counts read and written once from DRAM (the split programs' atomics meet in L2).
    rank_work = Work("rank screen sweep", unit, flop_class, streamed(s.block_m, s.block_n) + 32.0 * n_q,
                     l2_bytes=rank.total, notes="no undecided pairs (floor)", extra={"traffic": rank})  # fmt: skip
    if tk is not None:
        per_k = _cols_per_split(n_g, n_q, tk.block_m, tk.block_n, gpu)
        a = topk_bound_traffic(n_q, n_g, d, elem, tk.block_m, tk.block_n, per_k, split)
        pass_a = Work("top-k pass A: fused top-K of lower bounds", unit, flop_class,
                      streamed(tk.block_m, tk.block_n) + a.store, l2_bytes=a.total, extra={"traffic": a})  # fmt: skip
    else:
        a = bound_tile_traffic(n_q, n_g, d, elem, s.block_m, s.block_n, split)
        pass_a = Work("top-k pass A: dense lower-bound tiles", unit, flop_class,
                      streamed(s.block_m, s.block_n) + a.store, l2_bytes=a.total, extra={"traffic": a})  # fmt: skip
    per_b = _cols_per_split(n_g, n_q, s.block_m, s.block_n, gpu)
    tiles = _cdiv(n_q, s.block_m) * _cdiv(k, s.block_n)
    b = topk_collect_traffic(n_q, n_g, d, elem, s.block_m, s.block_n, per_b, split, tiles)
    pass_b = Work("top-k pass B: candidate collection", unit, flop_class,
                  streamed(s.block_m, s.block_n) + 4.0 * n_q + b.store + b.atomic, l2_bytes=b.total,
                  notes="k candidates per query (floor)", extra={"traffic": b})  # fmt: skip
    return [exact("ground-truth exact scores", n_q), rank_work, pass_a, pass_b,
            exact("top-k candidates' exact scores", n_q * k)]  # fmt: skip


def _retrieval_1m(n: int, d: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    units = gemm_unit(n, n, d)
    one_way = retrieval_kernels(n, n, d, "fp16", gpu)
    # Both directions count (ground truth + rank screen each); the top-k runs once (texts against images).
    task = _sequence("exact metrics both directions + top-10, fp16", one_way[:2] * 2 + one_way[2:],
                     "2 rank screens (one per direction) + the two-pass top-10")  # fmt: skip
    io = 2.0 * n * d * 2
    gemm = Work("the same-shape fp16 GEMM (chunked output)", units, "fp16", io + 2.0 * n * n, notes="1 unit")
    # faiss GpuIndexFlatIP searches float32 vectors: one fp32 GEMM (tf32 off) plus its k-selection.
    faiss = Work("faiss GpuIndexFlatIP top-10, fp32", units, "fp32", 2.0 * n * d * 4, notes="1 fp32 unit")
    return [{"*": task, "cublas_gemm": gemm, "faiss_gpu": faiss}]


def _retrieval_host(n: int, d: int, chunk: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    counting = retrieval_kernels(n, n, d, "fp16", gpu)[:2] * 2
    resident = _sequence("exact metrics both directions, fp16, resident", counting)
    host = Work("texts over PCIe", host_bytes=n * d * 2.0, notes="texts cross PCIe at least once")
    streamed = _sequence("exact metrics both directions, texts streamed from host", [*counting, host])
    return [{"*": resident, "streamed": streamed}]


def _box_iou(n: int, m: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    return [{"*": Work("pairwise box IoU, fp32", 12.0 * n * m, "fp32", (n + m) * 16.0 + n * m * 4.0,
                       notes="N×M fp32 output written once")}]  # fmt: skip


def _rle_iou_counts(n: int, m: int, h: int, w: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    # The run lengths depend on the masks, not on the parameters: the floor counts the float64 output only.
    return [{"*": Work("RLE IoU, float64 out", 0.0, "fp64", n * m * 8.0, notes="loose floor: output bytes only")}]


def _rle_encode(n: int, h: int, w: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    return [{"*": Work("RLE encode of bool masks", 0.0, "fp32", float(n * h * w), notes="masks read once")}]


def _mask_iou(n: int, m: int, h: int, w: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    # Packed to bits, every pair ANDs and popcounts h·w/32 words.
    return [{"*": Work("dense mask IoU", 0.0, "fp32", (n + m) * h * w + n * m * 4.0, n * m * h * w / 32.0,
                       notes="masks read once; one popc per 32 pixels per pair")}]  # fmt: skip


def _count_above(n: int, m: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    return [{"*": Work("count_above, fp32 scores", 0.0, "fp32", n * m * 4.0 + n * 12.0, notes="scores read once")}]


def _siglip_score(n_frames: int, per_caption: int, d: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
    m = n_frames // per_caption
    w = Work("SigLIP score, fp16 embeddings", 6.0 * n_frames * d, "fp32", (n_frames + m) * d * 2.0 + n_frames * 4.0,
             notes="each embedding read once")  # fmt: skip
    return [{"*": w}, {"*": w}]


def _visdial(rounds: int, c: int, gpu: GpuPeaks = H100_SXM) -> list[dict[str, Work]]:
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


def peaks_for(device_name: str | None) -> GpuPeaks:
    """The peaks table for a ``torch.cuda.get_device_name()`` string: A100 when it names one, else H100 SXM."""
    return A100_SXM if device_name and "A100" in device_name else H100_SXM


def _gpu(device: str | GpuPeaks) -> GpuPeaks:
    return device if isinstance(device, GpuPeaks) else DEVICES.get(device) or peaks_for(device)


def work(
    case: str, params: dict, provider: str | None = None, index: int = 0, device: str | GpuPeaks = "H100 SXM"
) -> Work | None:
    """The modelled work of bench ``index`` of ``case`` (``"family/name"``) at ``params`` on ``device``, for
    ``provider`` (a provider that does different work than the task, e.g. the bare GEMM, has its own entry); None
    for an unmodelled case."""
    fn = MODELS.get(case)
    if fn is None:
        return None
    benches = fn(**params, gpu=_gpu(device))
    if not 0 <= index < len(benches):
        return None
    per = benches[index]
    return per.get(provider, per["*"]) if provider is not None else per["*"]


def limit_seconds(
    case: str, params: dict, device: str | GpuPeaks = "H100 SXM", provider: str | None = None, index: int = 0
) -> float | None:
    """MODEL lower-bound seconds for bench ``index`` of ``case`` at ``params`` on ``device`` (a ``DEVICES`` key, a
    GPU name, or ``GpuPeaks``); None when the case has no model. ``% of limit = 100 · limit / measured``."""
    gpu = _gpu(device)
    w = work(case, params, provider, index, gpu)
    return None if w is None else w.seconds(gpu)


# The GPU cases of the docs' tables, at DESIGN.md's target sizes.
DOC_CASES = (
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 1, None, "SigLIP B=65536 D=768 bf16"),
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 1, "vlkernels_deterministic", "SigLIP, deterministic"),
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 0, None, "InfoNCE B=65536 D=768 bf16"),
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 0, "vlkernels_deterministic", "InfoNCE, deterministic"),
    ("contrastive/loss_gpu", {"n": 65536, "d": 768}, 2, None, "one GEMM 65536×65536×768 bf16 (compulsory bytes)"),
    ("retrieval/gpu_1m", {"n": 1_000_000, "d": 512}, 0, None, "retrieval 1M×1M D=512 fp16, metrics + top-10"),
    ("boxes/box_iou", {"n": 4000, "m": 4000}, 0, None, "box IoU 4000×4000 fp32"),
)


def _fmt(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} µs"


def table() -> str:
    """Markdown table of the DOC_CASES on H100 SXM and A100 SXM (a MODEL)."""
    lines = [
        "| case (MODEL) | TFLOP | L2 GB (H100) | DRAM GB (H100) | H100 SXM limit | bound | A100 SXM limit | bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, params, index, provider, label in DOC_CASES:
        h, a = (work(case, params, provider, index, g) for g in (H100_SXM, A100_SXM))
        lines.append(
            f"| {label} | {h.flops / 1e12:.1f} | {h.l2_bytes / 1e9:.1f} | {h.dram_bytes / 1e9:.1f} | "
            f"{_fmt(h.seconds(H100_SXM))} | {h.bound(H100_SXM)} | {_fmt(a.seconds(A100_SXM))} | {a.bound(A100_SXM)} |"
        )
    return "\n".join(lines)


def kernel_table(gpu: GpuPeaks = H100_SXM) -> str:
    """Markdown table: every Triton kernel of the training and retrieval cases on ``gpu``, with each term's time and
    the bound it hits (a MODEL)."""
    n, d = 65536, 768
    rows = [
        *info_nce_kernels(n, n, d, "bf16", gpu),
        *info_nce_kernels(n, n, d, "bf16", gpu, True)[1:],
        *siglip_kernels(n, n, d, "bf16", gpu),
        *siglip_kernels(n, n, d, "bf16", gpu, True),
        *retrieval_kernels(1_000_000, 1_000_000, 512, "fp16", gpu),
    ]
    lines = [
        f"| kernel (MODEL, {gpu.name}) | TFLOP | tensor | L2 GB | L2 | DRAM GB | DRAM | MUFU | limit | bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in rows:
        t = w.terms(gpu)
        compute = next(iter(t))
        lines.append(
            f"| {w.what} | {w.flops / 1e12:.1f} | {_fmt(t[compute])} | {w.l2_bytes / 1e9:.1f} | {_fmt(t['L2'])} | "
            f"{w.dram_bytes / 1e9:.1f} | {_fmt(t['DRAM'])} | {_fmt(t['MUFU/POPC'])} | {_fmt(w.seconds(gpu))} | "
            f"{w.bound(gpu)} |"
        )
    return "\n".join(lines)


def profile_table() -> str:
    """The static GPU profile's committed rows (benchmarks/results/gpu_static.jsonl) as one markdown table."""
    from vlkernels.dev.profile import keys, report

    return report.table(keys.read_rows(keys.COMMITTED))


# docs/gpu.md holds these tables between <!-- begin NAME --> and <!-- end NAME --> lines.
DOC_TABLES = {"roofline-cases": table, "roofline-kernels": kernel_table, "gpu-profile": profile_table}


def render_docs(text: str) -> str:
    """``text`` with every DOC_TABLES block replaced by its current table."""
    for name, fn in DOC_TABLES.items():
        begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
        head, sep, rest = text.partition(begin)
        if not sep:
            raise ValueError(f"the docs have no {begin!r} line")
        _, sep, tail = rest.partition(end)
        if not sep:
            raise ValueError(f"the docs have no {end!r} line after {begin!r}")
        text = f"{head}{begin}\n{fn()}\n{end}{tail}"
    return text
