"""open_clip drop-ins: ``ClipLoss`` and ``SigLipLoss`` with the same constructor arguments, forward and returns."""

from __future__ import annotations

import torch
from torch import nn

from vlkernels._validate import as_integer
from vlkernels.contrastive import distributed as vdist
from vlkernels.contrastive.losses import info_nce_shard, loss_dtype, needs_grad, validate_pair
from vlkernels.contrastive.ops import siglip_fused

SIGLIP_DIST_IMPLS = ("bidir", "shift", "reduce", "gather")


def _check_world(rank: int, world_size: int) -> tuple[int, int]:
    """(rank, world_size) as ints; a fraction or a string is refused (rank=0.7, world_size=1.9 read as a local loss)."""
    r, w = as_integer(rank), as_integer(world_size)
    if r is None or w is None or w < 1 or not 0 <= r < w:
        raise ValueError(
            f"need integers world_size >= 1 and 0 <= rank < world_size, got rank={rank!r}, world_size={world_size!r}"
        )
    return r, w


class _ContrastiveLoss(nn.Module):
    """open_clip's loss-module forward; subclasses compute the loss of validated inputs in ``_loss``."""

    def forward(
        self,
        image_features: torch.Tensor,
        text_features: torch.Tensor,
        logit_scale: torch.Tensor | float,
        logit_bias: torch.Tensor | float | None = None,
        output_dict: bool = False,
        *,
        image_groups: torch.Tensor | None = None,
        text_groups: torch.Tensor | None = None,
    ):
        """The loss of this batch (this rank's value under ``world_size > 1``), as the open_clip module's forward.

        Args:
            image_features: ``(N, D)`` fp32/fp16/bf16/float64, any strides, need not be unit-norm.
            text_features: ``(M, D)``, same dtype and device; ``M == N`` unless groups are given.
            logit_scale: the exp'd scale ``s``: a one-element tensor (differentiable) or a float.
            logit_bias: optional ``b`` (one-element tensor or float); InfoNCE does not depend on it.
            output_dict: return ``{"contrastive_loss": loss}`` instead of the tensor.
            image_groups, text_groups: keyword-only ``(N,)``/``(M,)`` int64 ids: equal ids are positives (across
                ranks too).

        Returns:
            0-dim loss in open_clip's dtype (that of ``logit_scale * features``: fp16/bf16 features with a 0-dim
            fp32 scale give an fp16/bf16 loss), or the dict. Computed in fp32 (float64 for float64 features).

        Raises:
            ValueError: bad dtypes, shapes, devices or groups (see :func:`vlkernels.info_nce_loss`); InfoNCE groups
                with no positive pair; ``world_size > 1`` without a matching default process group.

        Note:
            Memory O((N + M)·D), never N×M (SigLIP keeps its gradients, formed in the forward pass, when any input
            requires grad). Differentiable in the features, ``logit_scale`` and ``logit_bias``; deterministic on
            CPU and under ``torch.use_deterministic_algorithms(True)``.
        """
        x, y, s, b, gx, gy = validate_pair(
            image_features, text_features, logit_scale, logit_bias, image_groups, text_groups, False
        )
        loss = self._loss(x, y, s, b, gx, gy).to(loss_dtype(x, logit_scale))
        return {"contrastive_loss": loss} if output_dict else loss


class ClipLoss(_ContrastiveLoss):
    """InfoNCE (CLIP) loss that never builds the N×N logits; drop-in for ``open_clip.loss.ClipLoss``.

    Single process: exactly open_clip's value and gradients (see :func:`vlkernels.info_nce_loss`).

    ``world_size > 1`` (default process group): every rank gathers the features (the kernels only ever see its
    own n rows against the N gathered columns) and combines the column log-sum-exps across ranks in O(N) memory.
    The returned value is open_clip's: the global loss, or with ``local_loss=True`` this rank's rows' and columns'
    loss (the mean over ranks is the global loss). Gradients are always those of the global objective: after DDP
    averages the parameter gradients they equal single-process training on the global batch, whatever
    ``gather_with_grad`` says. open_clip matches this only with ``gather_with_grad=True``; with its default
    (``False``) each rank keeps just the gradient through its own copy of the features, so the averaged feature
    gradients are 1/W of the global ones (and without the cross-rank terms under ``local_loss``).
    ``logit_scale``/``logit_bias`` receive this rank's partial gradient (the tiles it computed); DDP's average
    of the partials is the global gradient.

    Args:
        local_loss, gather_with_grad, cache_labels, rank, world_size, use_horovod: open_clip's arguments.
            ``cache_labels`` has no effect (no label tensor exists); ``use_horovod=True`` is not supported.
        label_smoothing: ``ε`` of the InfoNCE targets (keyword; an extension).

    Forward: ``(image_features, text_features, logit_scale, logit_bias=None, output_dict=False)`` plus the
    keyword-only extensions ``image_groups``/``text_groups``; returns the 0-dim loss or
    ``{"contrastive_loss": loss}``. Under ``world_size > 1`` all ranks must pass equal shapes.
    """

    def __init__(
        self,
        local_loss: bool = False,
        gather_with_grad: bool = False,
        cache_labels: bool = False,
        rank: int = 0,
        world_size: int = 1,
        use_horovod: bool = False,
        *,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        rank, world_size = _check_world(rank, world_size)
        if use_horovod:
            raise ValueError("use_horovod=True is not supported; run the loss under torch.distributed instead")
        if not 0.0 <= float(label_smoothing) < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.local_loss = local_loss
        self.gather_with_grad = gather_with_grad
        self.cache_labels = cache_labels
        self.rank, self.world_size = rank, world_size
        self.use_horovod = use_horovod
        self.label_smoothing = float(label_smoothing)

    def _loss(self, x, y, s, b, gx, gy) -> torch.Tensor:
        eps = self.label_smoothing
        if self.world_size == 1:
            loss = info_nce_shard(x, y, gx, gy, s, b, eps)
        else:
            vdist.check_process_group(self.rank, self.world_size)
            w, r = self.world_size, self.rank
            all_x, all_y = vdist.all_gather(x), vdist.all_gather(y)
            all_gx, all_gy = vdist.all_gather(gx), vdist.all_gather(gy)
            share = info_nce_shard(
                x, y, gx, gy, s, b, eps, everyone=(all_x, all_y, all_gx, all_gy),
                offsets=(r * x.shape[0], r * y.shape[0]), combine_cols=vdist.global_logsumexp,
            )  # fmt: skip
            # Rank objective W·L_r: Σ_r of it is W·L, so DDP's 1/W average of the gradients yields ∂L.
            loss = w * share
            if not self.local_loss:
                total = share.detach().clone()
                torch.distributed.all_reduce(total)
                loss = loss + (total - loss).detach()
        return loss


class SigLipLoss(_ContrastiveLoss):
    """Sigmoid (SigLIP) loss in one streaming pass; drop-in for ``open_clip.loss.SigLipLoss``.

    Each rank returns open_clip's value ``(1/n)·Σ_{i local, j all} softplus(-z_ij·logit_ij)`` and the same
    gradients (feature gradients include the other ranks' terms through the exchange; scale and bias get the
    rank's partial). ``dist_impl``: ``"bidir"`` (default) and ``"shift"`` pass the text features around the ring,
    one neighbour exchange per step; ``"gather"`` (and ``"reduce"``, computed the same way) all-gathers them.
    Positives are the global diagonal (or equal group ids, across ranks too); N×N is never built.

    Args:
        cache_labels, rank, world_size, dist_impl: open_clip's arguments (``cache_labels`` has no effect).

    Forward: ``(image_features, text_features, logit_scale, logit_bias=None, output_dict=False)`` plus keyword-only
    ``image_groups``/``text_groups``; returns the loss or ``{"contrastive_loss": loss}``.
    """

    def __init__(
        self, cache_labels: bool = False, rank: int = 0, world_size: int = 1, dist_impl: str | None = None
    ) -> None:
        super().__init__()
        rank, world_size = _check_world(rank, world_size)
        impl = dist_impl or "bidir"
        if impl not in SIGLIP_DIST_IMPLS:
            raise ValueError(f"dist_impl must be one of {SIGLIP_DIST_IMPLS}, got {dist_impl!r}")
        self.cache_labels = cache_labels
        self.rank, self.world_size = rank, world_size
        self.dist_impl = impl

    def _loss(self, x, y, s, b, gx, gy) -> torch.Tensor:
        n, m = x.shape[0], y.shape[0]
        w, r = self.world_size, self.rank

        def block(texts, groups, owner):
            # Global indices: our images start at r·n, the block's texts at owner·m (positives: equal index).
            need = needs_grad(x, texts, s, b)
            return siglip_fused(x, texts, s, b, gx, groups, r * n, owner * m, 1.0 / n, need)

        if w == 1:
            loss = block(y, gy, 0)
        else:
            vdist.check_process_group(r, w)
            if self.dist_impl in ("gather", "reduce"):
                loss = siglip_fused(
                    x, vdist.all_gather(y), s, b, gx, vdist.all_gather(gy), r * n, 0, 1.0 / n,
                    needs_grad(x, y, s, b),
                )  # fmt: skip
            elif self.dist_impl == "shift":
                loss = block(y, gy, r)
                right, left = (r + 1) % w, (r - 1) % w
                texts, groups = y, gy
                for step in range(1, w):
                    texts, groups = vdist.shift(texts, right, left), vdist.shift(groups, right, left)
                    loss = loss + block(texts, groups, (r - step) % w)
            else:
                loss = block(y, gy, r)
                right, left = (r + 1) % w, (r - 1) % w
                to_left = to_right = y
                g_left = g_right = gy
                n_bidir, remainder = divmod(w - 1, 2)
                for step in range(1, n_bidir + 1):
                    from_right, from_left = vdist.bidir_shift(to_left, to_right, left, right)
                    g_from_right, g_from_left = vdist.bidir_shift(g_left, g_right, left, right)
                    loss = loss + block(from_right, g_from_right, (r + step) % w)
                    loss = loss + block(from_left, g_from_left, (r - step) % w)
                    to_left, to_right, g_left, g_right = from_right, from_left, g_from_right, g_from_left
                if remainder:
                    texts, groups = vdist.shift(to_right, right, left), vdist.shift(g_right, right, left)
                    loss = loss + block(texts, groups, (r - n_bidir - 1) % w)
        return loss
