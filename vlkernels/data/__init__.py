"""Small real data sets shipped inside the package (see README.md in this folder for sources and licenses)."""

from __future__ import annotations

import functools
import json
import lzma
from importlib import resources


@functools.cache
def _karpathy_json() -> str:
    blob = resources.files(__package__).joinpath("coco_karpathy_test_captions.json.xz").read_bytes()
    return lzma.decompress(blob).decode("utf-8")


def karpathy_test_captions() -> dict[str, list[str]]:
    """The raw human captions of COCO's 5,000 Karpathy-test images: ``{image_id (str): [5 or 6 captions]}``.

    COCO Captions, CC BY 4.0. Returns a fresh dict on every call (callers may mutate it).
    """
    return json.loads(_karpathy_json())


def leave_one_out(captions: dict[str, list[str]]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Human leave-one-out protocol: the last caption of each image is the candidate, the others the references.

    Returns ``(references, candidates)`` as pycocoevalcap-style ``{id: [captions]}`` dicts.
    """
    refs = {k: v[:-1] for k, v in captions.items()}
    cands = {k: [v[-1]] for k, v in captions.items()}
    return refs, cands
