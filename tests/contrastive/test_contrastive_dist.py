"""Distributed contrastive losses with real gloo process groups (2 and 3 processes on CPU).

Every mode is checked against the single-process loss on the global batch computed by open_clip itself, with the
DDP rule: feature gradients / W (DDP's average) = the global gradient; the ranks' mean scale/bias gradient = the
global one. open_clip's own distributed losses run in the same workers, for its per-rank values and its quirk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from gloo_ranks import run_ranks

from vlkernels import testing

N_PER_RANK, D = 6, 24

CLIP_MODES = [(False, False), (False, True), (True, False), (True, True)]
SIGLIP_MODES = ["bidir", "shift", "gather", "reduce"]


def open_clip_loss_module():
    mod = testing.open_clip_loss_module()
    if mod is None:
        pytest.skip("open-clip-torch is not installed (its loss.py is the reference)")
    return mod


def global_batch(world: int):
    g = torch.Generator().manual_seed(1234 + world)
    n = N_PER_RANK * world
    x = torch.randn(n, D, generator=g, dtype=torch.float64) * 1.5
    y = torch.randn(n, D, generator=g, dtype=torch.float64)
    groups = torch.randint(0, n // 2, (n,), generator=g)
    return x, y, torch.tensor(4.0, dtype=torch.float64), torch.tensor(-3.0, dtype=torch.float64), groups


def _run(loss_fn, x, y, s, b, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (x, y, s, b)]
    loss = loss_fn(*leaves, **kw)
    loss.backward()
    return [loss.detach().clone()] + [t.grad.clone() for t in leaves]


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ["TRITON_INTERPRET"] = "0"  # the distributed logic sits above the kernels: use the fast CPU path
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    import vlkernels
    from vlkernels.contrastive.modules import ClipLoss, SigLipLoss

    oc = open_clip_loss_module()
    x, y, s, b, groups = global_batch(world)
    sl = slice(rank * N_PER_RANK, (rank + 1) * N_PER_RANK)
    xl, yl, gl = x[sl].float(), y[sl].float(), groups[sl]
    sf, bf = s.float(), b.float()
    out = {}
    for local, gwg in CLIP_MODES:
        ours = ClipLoss(local_loss=local, gather_with_grad=gwg, rank=rank, world_size=world)
        out[("ours_clip", local, gwg)] = _run(ours, xl, yl, sf, bf)
        theirs = oc.ClipLoss(local_loss=local, gather_with_grad=gwg, rank=rank, world_size=world)
        out[("oc_clip", local, gwg)] = _run(theirs, xl, yl, sf, bf)
    smooth = vlkernels.ClipLoss(rank=rank, world_size=world, label_smoothing=0.1)
    out["ours_clip_groups"] = _run(smooth, xl, yl, sf, bf, image_groups=gl, text_groups=gl)
    for impl in SIGLIP_MODES:
        out[("ours_siglip", impl)] = _run(SigLipLoss(rank=rank, world_size=world, dist_impl=impl), xl, yl, sf, bf)
        theirs = oc.SigLipLoss(rank=rank, world_size=world, dist_impl=impl)
        out[("oc_siglip", impl)] = _run(theirs, xl, yl, sf, bf)
    grouped = SigLipLoss(rank=rank, world_size=world, dist_impl="bidir")
    out["ours_siglip_groups"] = _run(grouped, xl, yl, sf, bf, image_groups=gl, text_groups=gl)
    # Transposed text features through the ring (gloo receives only into contiguous buffers), then a second call on
    # the same group: both must run.
    yt = yl.t().contiguous().t()
    for impl in ("shift", "bidir"):
        loss = SigLipLoss(rank=rank, world_size=world, dist_impl=impl)
        out[("transposed_siglip", impl)] = _run(loss, xl, yt, sf, bf)
        out[("after_transposed_siglip", impl)] = _run(loss, xl, yl, sf, bf)
    try:
        ClipLoss(rank=(rank + 1) % world, world_size=world)(xl, yl, sf)
    except ValueError as e:
        out["rank_mismatch_error"] = str(e)
    torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _spawn(world: int, out_dir: Path):
    run_ranks(_worker, world, str(out_dir))
    return world, [torch.load(out_dir / f"rank{r}.pt") for r in range(world)]


def _global(loss_fn, world, **kw):
    x, y, s, b, _ = global_batch(world)
    return _run(loss_fn, x, y, s, b, **kw)


def _bounds(kind: str, world: int, **kw) -> dict[str, torch.Tensor]:
    """fp32 error bounds of the global-batch computation (vlkernels.testing), times W: a rank's value or gradient is
    W times a share of the global sums, and the exchanges add at most W roundings of the same magnitude."""
    x, y, s, b, _ = global_batch(world)
    return {k: world * v for k, v in testing.contrastive_error_bounds(kind, x, y, s, b, upstream=1.0, **kw).items()}


def _assert(actual, expected, name, bound):
    testing.assert_within_bounds(actual, expected, bound, name)


def _check_ddp_rule(ranks, ref, world, value_is_global: bool, name: str, bounds):
    """Feature grads / W = global grads of the shard; mean scale/bias grad = global; loss value global or mean."""
    loss, gx, gy, gs, gb = ref
    for r, res in enumerate(ranks):
        sl = slice(r * N_PER_RANK, (r + 1) * N_PER_RANK)
        _assert(res[1] / world, gx[sl], f"{name} rank {r} d image", bounds["d image"][sl])
        _assert(res[2] / world, gy[sl], f"{name} rank {r} d text", bounds["d text"][sl])
        if value_is_global:
            _assert(res[0], loss, f"{name} rank {r} loss", bounds["loss"])
    _assert(torch.stack([r[0] for r in ranks]).mean(), loss, f"{name} mean loss", bounds["loss"])
    _assert(torch.stack([r[3] for r in ranks]).mean(), gs, f"{name} mean d scale", bounds["d scale"])
    _assert(torch.stack([r[4] for r in ranks]).mean(), gb, f"{name} mean d bias", bounds["d bias"])


def _clip_loss_distributed_matches_global_batch(dist_results):
    world, ranks = dist_results
    oc = open_clip_loss_module()
    ref = _global(oc.ClipLoss(), world)
    bounds = _bounds("info_nce", world)
    for local, gwg in CLIP_MODES:
        ours = [r[("ours_clip", local, gwg)] for r in ranks]
        name = f"ClipLoss(local={local}, gwg={gwg})"
        _check_ddp_rule(ours, ref, world, value_is_global=not local, name=name, bounds=bounds)
        theirs = [r[("oc_clip", local, gwg)] for r in ranks]
        for r in range(world):
            sl = slice(r * N_PER_RANK, (r + 1) * N_PER_RANK)
            # Per-rank loss values are open_clip's in every mode (two fp32 computations: twice the bound).
            _assert(
                ours[r][0], theirs[r][0], f"rank {r} loss vs open_clip (local={local}, gwg={gwg})", 2 * bounds["loss"]
            )
            if gwg:
                # With gather_with_grad open_clip propagates across ranks too: identical feature gradients.
                _assert(ours[r][1], theirs[r][1], f"rank {r} d image vs open_clip gwg", 2 * bounds["d image"][sl])
                _assert(ours[r][2], theirs[r][2], f"rank {r} d text vs open_clip gwg", 2 * bounds["d text"][sl])


def _open_clip_default_flags_quirk(dist_results):
    """open_clip's default (gather_with_grad=False, local_loss=False): after DDP averaging its feature gradients
    are 1/W of the global ones; ours (the same flags) give the global ones."""
    world, ranks = dist_results
    oc = open_clip_loss_module()
    _, gx, gy, _, _ = _global(oc.ClipLoss(), world)
    bounds = _bounds("info_nce", world)
    for r, res in enumerate(ranks):
        sl = slice(r * N_PER_RANK, (r + 1) * N_PER_RANK)
        theirs, ours = res[("oc_clip", False, False)], res[("ours_clip", False, False)]
        _assert(theirs[1] / world, gx[sl] / world, "open_clip default d image (DDP-averaged)", bounds["d image"][sl])
        _assert(theirs[2] / world, gy[sl] / world, "open_clip default d text (DDP-averaged)", bounds["d text"][sl])
        _assert(ours[1] / world, gx[sl], "ours default d image (DDP-averaged)", bounds["d image"][sl])


def _clip_loss_distributed_groups_and_smoothing(dist_results):
    from vlkernels.contrastive.reference import info_nce_loss_ref

    world, ranks = dist_results
    groups = global_batch(world)[4]
    kw = dict(image_groups=groups, text_groups=groups, label_smoothing=0.1)
    ref = _global(info_nce_loss_ref, world, **kw)
    bounds = _bounds("info_nce", world, **kw)
    _check_ddp_rule([r["ours_clip_groups"] for r in ranks], ref, world, True, "ClipLoss groups+smoothing", bounds)


def _siglip_loss_distributed_matches_open_clip_and_global_batch(dist_results):
    world, ranks = dist_results
    oc = open_clip_loss_module()
    ref = _global(oc.SigLipLoss(), world)
    bounds = _bounds("siglip", world)
    for impl in SIGLIP_MODES:
        ours = [r[("ours_siglip", impl)] for r in ranks]
        # open_clip's per-rank value is (1/n)·Σ over its rows: the mean over ranks is the global loss.
        _check_ddp_rule(ours, ref, world, value_is_global=False, name=f"SigLipLoss({impl})", bounds=bounds)
        for r in range(world):
            sl = slice(r * N_PER_RANK, (r + 1) * N_PER_RANK)
            theirs = ranks[r][("oc_siglip", impl)]
            for k, what in enumerate(("loss", "d image", "d text", "d scale", "d bias")):
                bound = 2 * (bounds[what][sl] if bounds[what].dim() else bounds[what])
                _assert(ours[r][k], theirs[k], f"SigLipLoss({impl}) rank {r} {what} vs open_clip", bound)


def _siglip_loss_distributed_groups(dist_results):
    from vlkernels.contrastive.reference import siglip_loss_ref

    world, ranks = dist_results
    groups = global_batch(world)[4]
    ref = _global(siglip_loss_ref, world, image_groups=groups, text_groups=groups)
    bounds = _bounds("siglip", world, image_groups=groups, text_groups=groups)
    _check_ddp_rule([r["ours_siglip_groups"] for r in ranks], ref, world, False, "SigLipLoss groups", bounds)


@pytest.mark.parametrize("world", [2, 3])
def test_losses_distributed_every_mode(world, tmp_path):
    """One process group per world size (spawning is the expensive part); every mode is checked on its results."""
    results = _spawn(world, tmp_path)
    _clip_loss_distributed_matches_global_batch(results)
    _open_clip_default_flags_quirk(results)
    _clip_loss_distributed_groups_and_smoothing(results)
    _siglip_loss_distributed_matches_open_clip_and_global_batch(results)
    _siglip_loss_distributed_groups(results)
    # A rank that disagrees with the process group is refused before any collective runs.
    assert all("do not match the process group" in r.get("rank_mismatch_error", "") for r in results[1])
    _siglip_loss_distributed_transposed_text(results)


def _siglip_loss_distributed_transposed_text(dist_results):
    """Transposed text features through the ring (they raised, and left the ring out of step for the next call): the
    same rule against the global batch as the contiguous runs."""
    world, ranks = dist_results
    ref = _global(open_clip_loss_module().SigLipLoss(), world)
    bounds = _bounds("siglip", world)
    for impl in ("shift", "bidir"):
        for key in ("transposed_siglip", "after_transposed_siglip"):
            ours = [r[(key, impl)] for r in ranks]
            _check_ddp_rule(ours, ref, world, value_is_global=False, name=f"{key}({impl})", bounds=bounds)
