"""Embedding sources: tensors, arrays and memory-mapped .npy / .safetensors files, read in row chunks."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import torch

from vlkernels._validate import FLOAT_DTYPES

_ST_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": "bf16"}


class Embeddings:
    """A ``(N, D)`` float matrix held in memory or memory-mapped from a file; ``chunk(a, b)`` reads rows a..b.

    Chunks come back contiguous in the compute dtype (fp32, or fp64 for fp64 input) on the source's device, so a
    gallery larger than memory is read one chunk at a time.
    """

    def __new__(cls, source=None, name: str = "embeddings", key: str | None = None):
        # An Embeddings passes through unchanged (the CLI opens files once, then hands them on).
        if isinstance(source, Embeddings):
            return source
        return super().__new__(cls)

    def __init__(self, source, name: str = "embeddings", key: str | None = None):
        if source is self:
            return
        self.name = name
        self.tensor: torch.Tensor | None = None
        self.array: np.ndarray | None = None
        self.bf16 = False
        if isinstance(source, (str, Path)):
            source = load_array(source, name, key)
            if isinstance(source, tuple):  # bf16 safetensors: raw uint16 view, widened per chunk
                source, self.bf16 = source[0], True
        if isinstance(source, torch.Tensor):
            if source.dtype not in FLOAT_DTYPES:
                raise ValueError(f"{name} has dtype {str(source.dtype).replace('torch.', '')}; expected a float dtype")
            if source.dim() != 2:
                raise ValueError(f"{name} must be a 2-D (N, D) matrix, got shape {tuple(source.shape)}")
            self.tensor = source.detach()
            self.shape = tuple(source.shape)
            self.device = source.device
            self.dtype = source.dtype
        elif isinstance(source, np.ndarray):
            if source.ndim != 2:
                raise ValueError(f"{name} must be a 2-D (N, D) matrix, got shape {source.shape}")
            if not self.bf16 and source.dtype not in (np.float16, np.float32, np.float64):
                raise ValueError(f"{name} has dtype {source.dtype}; expected float16, bfloat16, float32 or float64")
            self.array = source
            self.shape = tuple(source.shape)
            self.device = torch.device("cpu")
            self.dtype = torch.bfloat16 if self.bf16 else getattr(torch, str(source.dtype))
        else:
            raise ValueError(f"{name} must be a torch.Tensor, numpy array or a .npy/.safetensors path")

    @property
    def compute_dtype(self) -> torch.dtype:
        return torch.float64 if self.dtype == torch.float64 else torch.float32

    def __len__(self) -> int:
        return self.shape[0]

    def chunk(self, start: int, stop: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        dtype = dtype or self.compute_dtype
        if self.tensor is not None:
            return self.tensor[start:stop].to(dtype).contiguous()
        # A copy: file pages are read-only and torch wants writable memory.
        raw = np.array(self.array[start:stop], copy=True)
        if self.bf16:
            return torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16).to(dtype)
        return torch.from_numpy(raw).to(dtype)

    def full(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.chunk(0, self.shape[0], dtype)

    def check_finite(self, chunk_rows: int = 1 << 16) -> None:
        for a in range(0, self.shape[0], chunk_rows):
            c = self.chunk(a, min(self.shape[0], a + chunk_rows))
            # One reduction settles the common case: a finite sum means no NaN/Inf (they propagate into it).
            if bool(torch.isfinite(c.sum())):
                continue
            if not bool(torch.isfinite(c).all()):
                bad = int((~torch.isfinite(c)).sum())
                raise ValueError(
                    f"{self.name} contains NaN/Inf values ({bad} in rows {a}..); embeddings must be finite"
                )


def load_array(path, name: str = "embeddings", key: str | None = None):
    """Memory-map a 2-D float matrix from ``.npy`` (never pickle) or ``.safetensors`` (one tensor, or ``key``)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{name}: file {path} does not exist")
    if path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as e:
            raise ValueError(f"{name}: {path} is not a plain numeric .npy file ({e})") from e
        if arr.dtype not in (np.float16, np.float32, np.float64):
            raise ValueError(f"{name}: {path} holds dtype {arr.dtype}; expected float16, float32 or float64")
        if arr.ndim != 2:
            raise ValueError(f"{name}: {path} holds shape {arr.shape}; expected a 2-D (N, D) matrix")
        return arr
    if path.suffix == ".safetensors":
        return _mmap_safetensors(path, name, key)
    raise ValueError(f"{name}: {path} has an unsupported extension; expected .npy or .safetensors")


def _mmap_safetensors(path: Path, name: str, key: str | None):
    # The format is an 8-byte header length, a JSON header, then raw little-endian data: map the one tensor.
    with path.open("rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        if hlen > 100_000_000:
            raise ValueError(f"{name}: {path} is not a safetensors file (header length {hlen})")
        header = json.loads(f.read(hlen))
    header.pop("__metadata__", None)
    if key is None:
        if len(header) != 1:
            raise ValueError(f"{name}: {path} holds tensors {sorted(header)}; pass the key of the embeddings")
        key = next(iter(header))
    if key not in header:
        raise ValueError(f"{name}: {path} has no tensor {key!r} (found {sorted(header)})")
    info = header[key]
    if info["dtype"] not in _ST_DTYPES:
        raise ValueError(f"{name}: tensor {key!r} in {path} has dtype {info['dtype']}; expected F16, BF16, F32 or F64")
    shape = tuple(info["shape"])
    if len(shape) != 2:
        raise ValueError(f"{name}: tensor {key!r} in {path} has shape {shape}; expected a 2-D (N, D) matrix")
    begin, end = info["data_offsets"]
    np_dtype = np.uint16 if info["dtype"] == "BF16" else _ST_DTYPES[info["dtype"]]
    if end - begin != shape[0] * shape[1] * np.dtype(np_dtype).itemsize:
        raise ValueError(f"{name}: tensor {key!r} in {path} has a data size that does not match its shape")
    arr = np.memmap(path, dtype=np_dtype, mode="r", offset=8 + hlen + begin, shape=shape)
    return (arr, True) if info["dtype"] == "BF16" else arr
