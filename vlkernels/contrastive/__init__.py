"""Fused contrastive losses: InfoNCE (CLIP) and sigmoid (SigLIP), drop-in for open_clip's ClipLoss/SigLipLoss."""

from vlkernels.contrastive.losses import info_nce_loss, siglip_loss

__all__ = ["info_nce_loss", "siglip_loss"]
