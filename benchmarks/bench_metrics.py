"""Metrics: SigLIP score over (frame, caption) pairs and VisDial ranks, against the plain torch users would write."""

import torch
import torch.nn.functional as F

from vlkernels.metrics import siglip_score, visdial_metrics

from .harness import Bench, register

SCALE, BIAS = 10.0, -5.0


def _close(out, ref_name="torch", atol=1e-5):
    def check(outputs):
        ref = outputs[ref_name].float().cpu()
        for name, v in outputs.items():
            if not torch.allclose(v.float().cpu(), ref, rtol=1e-4, atol=atol):
                err = (v.float().cpu() - ref).abs().max().item()
                raise AssertionError(f"{name} differs from {ref_name} by {err:.3e}")

    return check


@register(
    "metrics",
    "siglip_score",
    quick={"n_frames": 100_000, "per_caption": 8, "d": 256},
    full={"n_frames": 1_000_000, "per_caption": 8, "d": 256},
)
def _siglip_score(n_frames: int, per_caption: int, d: int, device: str) -> list[Bench]:
    g = torch.Generator().manual_seed(0)
    m = n_frames // per_caption
    img = torch.randn(n_frames, d, generator=g).half().to(device)
    txt = torch.randn(m, d, generator=g).half().to(device)
    # A variable number of frames per caption, shuffled: the explicit per-frame caption index.
    owner = torch.randint(0, m, (n_frames,), generator=g)
    owner[:m] = torch.arange(m)
    owner = owner.to(device)
    nbytes = (img.numel() + txt.numel()) * img.element_size()

    def plain_fixed():
        v = F.normalize(img.float(), dim=-1).view(m, per_caption, d)
        t = F.normalize(txt.float(), dim=-1)
        return torch.sigmoid((v * t.unsqueeze(1)).sum(-1) * SCALE + BIAS).mean(dim=1)

    def plain_index():
        v = F.normalize(img.float(), dim=-1)
        t = F.normalize(txt.float(), dim=-1)
        p = torch.sigmoid((v * t[owner]).sum(-1) * SCALE + BIAS)
        sums = torch.zeros(m, device=p.device).index_add_(0, owner, p)
        return sums / torch.bincount(owner, minlength=m)

    cases = [
        (per_caption, plain_fixed, f"{per_caption} per caption", "fixed frames per caption"),
        (owner, plain_index, "per-frame caption index (variable frames per caption)", "per-frame caption index"),
    ]
    return [
        Bench(
            providers={"vlkernels": lambda f=frames: siglip_score(img, txt, SCALE, BIAS, frames=f), "torch": plain},
            baseline="torch",
            check=_close(None),
            bytes=nbytes,
            notes=f"{n_frames} frames, {how}, fp16 D={d}",
            label=f"siglip_score, {label}",
        )
        for frames, plain, how, label in cases
    ]


@register("metrics", "visdial_ranks", quick={"rounds": 20_000, "c": 100}, full={"rounds": 200_000, "c": 100})
def _visdial(rounds: int, c: int, device: str) -> Bench:
    g = torch.Generator().manual_seed(0)
    # float64: with float32 randn a few of the 2e5 x 4950 score pairs would tie and the sort's order is arbitrary.
    scores = torch.randn(rounds, c, generator=g, dtype=torch.float64).to(device)
    gt = torch.randint(0, c, (rounds,), generator=g).to(device)

    def plain_sort():
        # The VisDial starter code's scores_to_ranks: a full sort, then the ground truth's position.
        order = scores.sort(dim=1, descending=True).indices
        return (order == gt.unsqueeze(1)).int().argmax(dim=1) + 1

    return Bench(
        providers={"vlkernels": lambda: visdial_metrics(scores, gt).ranks, "torch": plain_sort},
        baseline="torch",
        check=_close(None, atol=0),
        bytes=scores.numel() * scores.element_size(),
        notes="rank of the ground truth among 100 options (continuous scores: no ties)",
    )
