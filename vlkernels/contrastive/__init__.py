"""Fused contrastive losses: InfoNCE (CLIP) and sigmoid (SigLIP), drop-in for open_clip's ClipLoss/SigLipLoss."""

from vlkernels.contrastive.losses import info_nce_loss, siglip_loss
from vlkernels.contrastive.modules import ClipLoss, SigLipLoss

__all__ = ["ClipLoss", "SigLipLoss", "info_nce_loss", "siglip_loss"]
