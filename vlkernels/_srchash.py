"""Hash of the C++/CUDA sources, shared by setup.py (baked into the extension) and the loader (stale check).

Kept free of imports beyond the standard library: setup.py loads this file by path before anything is built.
"""

import hashlib
from pathlib import Path

SOURCE_DIRS = ("csrc", "python")
SOURCE_SUFFIXES = (".h", ".hpp", ".inc", ".cpp", ".cu", ".cuh")


def source_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for d in SOURCE_DIRS:
        base = root / d
        if base.is_dir():
            files += [p for p in base.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def source_hash(root: Path) -> str:
    """sha256 over (relative path, content) of every source that goes into vlkernels._C."""
    h = hashlib.sha256()
    for p in source_files(root):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]
