"""COCO RLE dicts (``{"size": [h, w], "counts": bytes | str | list}``) validated and flattened into run counts: the
one reader every RLE entry point (``rle.py``, ``rle_counts.py``, ``mask_api.py``) uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from vlkernels import _ext
from vlkernels._validate import as_integer

_MAX_PIXELS = 2**32 - 1  # pycocotools keeps sizes and runs in 32-bit unsigned integers
RLE = dict  # {"size": [h, w], "counts": bytes | str | list[int]}


@dataclass
class _RleSet:
    """Flattened runs: counts[offsets[k]:offsets[k + 1]] are RLE k's runs; h, w per RLE (all int64)."""

    counts: torch.Tensor
    offsets: torch.Tensor
    h: torch.Tensor
    w: torch.Tensor

    def __len__(self) -> int:
        return int(self.h.numel())


def _size_of(rle: object, name: str, k: int) -> tuple[int, int]:
    if not isinstance(rle, Mapping) or "size" not in rle or "counts" not in rle:
        raise ValueError(f"{name}[{k}] must be an RLE dict with 'size' and 'counts', got {type(rle).__name__}")
    size = rle["size"]
    # pycocotools reads any pair it can index, a numpy array included (np.array(mask.shape) is common).
    pair = size.tolist() if isinstance(size, np.ndarray) and size.ndim == 1 else size
    if not isinstance(pair, Sequence) or isinstance(pair, (str, bytes)) or len(pair) != 2:
        raise ValueError(f"{name}[{k}]['size'] must be [height, width], got {size!r}")
    h, w = as_integer(pair[0]), as_integer(pair[1])
    if h is None or w is None:
        raise ValueError(f"{name}[{k}]['size'] must hold two integers, got {size!r}")
    if h < 0 or w < 0 or h * w > _MAX_PIXELS:
        raise ValueError(f"{name}[{k}]['size'] {size!r} must be non-negative with h*w < 2**32")
    return h, w


def _run_lengths(counts: object, name: str, k: int) -> np.ndarray:
    """Uncompressed counts -> int64 runs, each an integer in [0, 2**32) (their sum is not checked here)."""
    try:
        runs = np.asarray(counts, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}[{k}]['counts'] must be bytes, str or a list of run lengths") from None
    if runs.ndim != 1 or not np.all(np.isfinite(runs)) or np.any(runs != np.floor(runs)):
        raise ValueError(f"{name}[{k}]['counts'] must be a flat list of integer run lengths")
    if runs.size and (runs.min() < 0 or runs.max() > _MAX_PIXELS):
        raise ValueError(f"{name}[{k}]['counts'] run lengths must lie in [0, 2**32)")
    return runs.astype(np.int64)


def _counts_bytes(counts: bytes | str, name: str, k: int) -> bytes:
    """A compressed counts string as bytes. pycocotools encodes str as UTF-8; every valid COCO string is ASCII
    (characters 48..111), so anything else is refused here by name rather than decoded as some other mask."""
    if isinstance(counts, bytes):
        return counts
    if not counts.isascii():
        i, ch = next((i, ch) for i, ch in enumerate(counts) if not ch.isascii())
        raise ValueError(
            f"malformed RLE string at {name}[{k}]: non-ASCII character {ch!r} at position {i} (COCO RLE counts use "
            "the characters '0' to 'o')"
        )
    return counts.encode("ascii")


def strings_buffer(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Compressed strings back to back (uint8) and their CSR offsets (int64 ``[N + 1]``): how strings reach C++."""
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in strings], out=offsets[1:])
    return np.frombuffer(b"".join(strings), dtype=np.uint8), offsets


def _parse_strings(strings: list[bytes], hw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Compressed strings -> (runs, CSR offsets, error message or "") with the C++ codec; Python allocates the runs
    once C++ has counted them."""
    C = _ext.load()
    buf, str_off = strings_buffer(strings)
    run_off = torch.empty(len(strings) + 1, dtype=torch.int64)
    C.rle_string_run_offsets(buf, str_off, run_off)
    counts = torch.empty(int(run_off[-1]), dtype=torch.int64)
    error = C.rle_parse(buf, str_off, hw, run_off, counts)
    return counts, run_off, error


def _uncompressed_runs(counts: object, hw: int, name: str, k: int) -> np.ndarray:
    runs = _run_lengths(counts, name, k)
    if int(runs.sum()) != hw:
        raise ValueError(f"malformed RLE at {name}[{k}]: runs sum to {int(runs.sum())} but the size h*w is {hw}")
    return runs


def _parse(rles: Sequence[RLE], name: str) -> _RleSet:
    """Validate a list of RLE dicts and flatten their runs (compressed strings are decoded in C++)."""
    if isinstance(rles, Mapping) or isinstance(rles, (str, bytes)) or not isinstance(rles, Sequence):
        raise ValueError(f"{name} must be a list of RLE dicts, got {type(rles).__name__}")
    sizes = [_size_of(r, name, k) for k, r in enumerate(rles)]
    hw = torch.tensor([h * w for h, w in sizes], dtype=torch.int64)
    raw = [r["counts"] for r in rles]
    if all(isinstance(c, (bytes, str)) for c in raw):
        strings = [_counts_bytes(c, name, k) for k, c in enumerate(raw)]
        counts, offsets, error = _parse_strings(strings, hw)
        if error:
            raise ValueError(error)
    else:
        parts = []
        for k, c in enumerate(raw):
            if isinstance(c, (bytes, str)):
                runs, _, error = _parse_strings([_counts_bytes(c, name, k)], hw[k : k + 1].contiguous())
                if error:
                    raise ValueError(error.replace("index 0", f"index {k}"))
                parts.append(runs.numpy())
            else:
                parts.append(_uncompressed_runs(c, int(hw[k]), name, k))
        lengths = torch.tensor([len(p) for p in parts], dtype=torch.int64)
        offsets = torch.zeros(len(parts) + 1, dtype=torch.int64)
        offsets[1:] = torch.cumsum(lengths, 0)
        counts = (
            torch.from_numpy(np.concatenate(parts).astype(np.int64)) if parts else torch.zeros(0, dtype=torch.int64)
        )
    h = torch.tensor([s[0] for s in sizes], dtype=torch.int64)
    w = torch.tensor([s[1] for s in sizes], dtype=torch.int64)
    return _RleSet(counts.contiguous(), offsets.contiguous(), h, w)
