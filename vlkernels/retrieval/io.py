"""Embedding sources: tensors, arrays and memory-mapped .npy / .safetensors files, read in row chunks."""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np
import torch

from vlkernels._validate import FLOAT_DTYPES
from vlkernels.retrieval.threads import single_threaded

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
            source = _load_array(source, name, key)
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
            native = source.dtype.newbyteorder("=")
            if not self.bf16 and native not in (np.float16, np.float32, np.float64):
                raise ValueError(f"{name} has dtype {source.dtype}; expected float16, bfloat16, float32 or float64")
            self.array = source
            self.shape = tuple(source.shape)
            self.device = torch.device("cpu")
            self.dtype = torch.bfloat16 if self.bf16 else getattr(torch, str(native))
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
        # A copy: file pages are read-only and torch wants writable memory; row-major whatever the file's order
        # (a Fortran-order .npy is a plain matrix too).
        raw = np.array(self.array[start:stop], dtype=self.array.dtype.newbyteorder("="), copy=True, order="C")
        _release_pages(self.array, start, stop)
        if self.bf16:
            return torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16).to(dtype)
        return torch.from_numpy(raw).to(dtype)

    def full(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.chunk(0, self.shape[0], dtype)

    def check_finite(self, chunk_rows: int = 1 << 16) -> None:
        if self.shape[1] == 0:  # nothing to read (a header may claim 2**40 zero-width rows)
            return
        for a in range(0, self.shape[0], chunk_rows):
            c = self.chunk(a, min(self.shape[0], a + chunk_rows))
            # One reduction settles the common case: a finite sum means no NaN/Inf (they propagate into it). On one
            # thread, as the CPU engine's own torch work (threads.single_threaded; a device's sum is not affected).
            with single_threaded():
                if bool(torch.isfinite(c.sum())):
                    continue
            if not bool(torch.isfinite(c).all()):
                bad = int((~torch.isfinite(c)).sum())
                raise ValueError(
                    f"{self.name} contains NaN/Inf values ({bad} in rows {a}..); embeddings must be finite"
                )

    def max_norm(self, chunk_rows: int = 1 << 16) -> float:
        """The largest row norm (float64; each row divided by its largest magnitude first, so no square overflows or
        underflows)."""
        best = 0.0
        for a in range(0, self.shape[0] if self.shape[1] else 0, chunk_rows):
            c = self.chunk(a, min(self.shape[0], a + chunk_rows), torch.float64)
            with single_threaded():
                m = c.abs().amax(dim=1)
                n = m * torch.linalg.vector_norm(c / torch.where(m > 0, m, 1.0)[:, None], dim=1)
            best = max(best, float(n.max()))
        return best


def _release_pages(arr: np.ndarray, start: int, stop: int) -> None:
    """Unmap the file pages of rows start..stop of a memory-mapped matrix once they have been copied.

    Pages of a file mapping count in the process's resident set for as long as they stay mapped, so a pass over a
    file larger than memory would make its RSS (and the OOM killer's view of it) the size of the file. MADV_DONTNEED
    drops them from this process only; they stay in the page cache and a later read maps them again. Only shared
    mappings are released (modes r, r+, w+): a copy-on-write mapping (mode c) would lose its private changes.
    """
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    mm = getattr(root, "_mmap", None)
    if (
        not isinstance(mm, mmap.mmap)
        or getattr(arr, "mode", None) not in ("r", "r+", "w+", "readonly", "readwrite", "write")
        or not arr.flags.c_contiguous
        or not hasattr(mm, "madvise")
        or stop <= start
    ):
        return
    # The mapping starts at the file offset rounded down to the allocation granularity (np.memmap's rule).
    base = root.__array_interface__["data"][0] - root.offset % mmap.ALLOCATIONGRANULARITY
    row = arr.strides[0]
    begin = arr.__array_interface__["data"][0] + start * row - base
    end = min(begin + (stop - start) * row, len(mm))
    begin -= begin % mmap.PAGESIZE
    if 0 <= begin < end:
        mm.madvise(mmap.MADV_DONTNEED, begin, end - begin)


def _load_array(path, name: str = "embeddings", key: str | None = None):
    """Memory-map a 2-D float matrix from ``.npy`` (never pickle) or ``.safetensors`` (one tensor, or ``key``): the
    array, or for BF16 (which numpy lacks) ``(uint16 array of the bits, True)``. Files are opened through
    :class:`Embeddings`, which widens bf16 chunk by chunk.

    Raises:
        ValueError: a missing file, an unsupported extension, or a malformed file (truncated, a bad header, offsets
            outside the file, a wrong dtype or shape), naming the file and what is wrong.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{name}: file {path} does not exist")
    if path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as e:
            # numpy's header parser reports a malformed file through many types (ValueError, EOFError, TypeError,
            # SyntaxError, tokenize.TokenError, OverflowError, ...); every one means "not a valid .npy".
            raise ValueError(f"{name}: {path} is not a plain numeric .npy file ({type(e).__name__}: {e})") from None
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{name}: {path} is not a plain numeric .npy file (an archive?)")
        # Either byte order: chunks are read in the native one.
        if arr.dtype.newbyteorder("=") not in (np.float16, np.float32, np.float64):
            raise ValueError(f"{name}: {path} holds dtype {arr.dtype}; expected float16, float32 or float64")
        if arr.ndim != 2:
            raise ValueError(f"{name}: {path} holds shape {arr.shape}; expected a 2-D (N, D) matrix")
        return arr
    if path.suffix == ".safetensors":
        return _mmap_safetensors(path, name, key)
    raise ValueError(f"{name}: {path} has an unsupported extension; expected .npy or .safetensors")


def _mmap_safetensors(path: Path, name: str, key: str | None):
    # The format is an 8-byte little-endian header length, a JSON header, then raw little-endian data: every field
    # of the one tensor used is checked against the file before it is mapped.
    def bad(what: str) -> ValueError:
        return ValueError(f"{name}: {path} is not a valid safetensors file: {what}")

    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise bad(f"{size} bytes, too short for the 8-byte header length")
        (hlen,) = struct.unpack("<Q", head)
        if hlen > min(size - 8, 100_000_000):
            raise bad(f"header length {hlen} exceeds the file ({size} bytes)")
        raw = f.read(hlen)
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # not UTF-8, not JSON, or an integer of over 4,300 digits
        raise bad(f"header is not UTF-8 JSON ({e})") from None
    except RecursionError:
        raise bad("header JSON nested too deeply") from None
    if not isinstance(header, dict):
        raise bad(f"header is a JSON {type(header).__name__}, expected an object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise bad("__metadata__ must be an object of strings")
    if key is None:
        if len(header) != 1:
            raise ValueError(f"{name}: {path} holds tensors {sorted(header)}; pass the key of the embeddings")
        key = next(iter(header))
    if key not in header:
        raise ValueError(f"{name}: {path} has no tensor {key!r} (found {sorted(header)})")
    info = header[key]
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise bad(f"tensor {key!r} needs an object with 'dtype', 'shape' and 'data_offsets'")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in _ST_DTYPES:
        raise ValueError(f"{name}: tensor {key!r} in {path} has dtype {dtype}; expected F16, BF16, F32 or F64")
    if not isinstance(shape, list) or not all(_is_count(v) for v in shape):
        raise bad(f"tensor {key!r} has shape {shape!r}; expected a list of non-negative integers")
    if len(shape) != 2:
        raise ValueError(f"{name}: tensor {key!r} in {path} has shape {tuple(shape)}; expected a 2-D (N, D) matrix")
    if any(v >= 2**62 for v in shape):
        raise bad(f"tensor {key!r} has shape {tuple(shape)}, beyond any array")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(v) for v in offsets):
        raise bad(f"tensor {key!r} has data_offsets {offsets!r}; expected [begin, end]")
    begin, end = offsets
    if not begin <= end <= size - 8 - hlen:
        raise bad(f"tensor {key!r} data_offsets [{begin}, {end}] lie outside the {size - 8 - hlen}-byte data section")
    # As safetensors' own reader: the tensors tile the data section exactly (no gap, overlap or trailing bytes), so
    # a header that describes part of the data is refused rather than read as fewer rows.
    spans = []
    for k, v in header.items():
        offs = v.get("data_offsets") if isinstance(v, dict) else None
        if not isinstance(offs, list) or len(offs) != 2 or not all(_is_count(x) for x in offs) or offs[0] > offs[1]:
            raise bad(f"tensor {k!r} has data_offsets {offs!r}; expected [begin, end]")
        spans.append((offs[0], offs[1], k))
    covered, data_size = 0, size - 8 - hlen
    for b0, b1, k in sorted(spans):
        if b0 != covered:
            raise bad(
                f"tensor {k!r} starts at byte {b0} of the data section, where the tensors before it end at "
                f"{covered} (a gap or an overlap)"
            )
        covered = b1
    if covered != data_size:
        raise bad(f"the tensors cover {covered} of the {data_size} bytes of the data section")
    np_dtype = np.uint16 if dtype == "BF16" else _ST_DTYPES[dtype]
    if end - begin != shape[0] * shape[1] * np.dtype(np_dtype).itemsize:
        raise ValueError(f"{name}: tensor {key!r} in {path} has a data size that does not match its shape")
    if shape[0] * shape[1] == 0:
        arr = np.zeros(shape, dtype=np_dtype)  # np.memmap cannot map zero bytes
    else:
        arr = np.memmap(path, dtype=np_dtype, mode="r", offset=8 + hlen + begin, shape=tuple(shape))
    return (arr, True) if dtype == "BF16" else arr


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0
