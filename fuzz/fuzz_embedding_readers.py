"""Fuzz target for the retrieval embedding-file readers (.npy and .safetensors, vlkernels.retrieval.io).

Contract under test: any byte string read as an embedding file either loads as an (N, D) float matrix whose rows
can be read, or raises ValueError naming the file. Any other exception, a crash or a hang is a finding.

    python fuzz/fuzz_embedding_readers.py [corpus_dir] -max_total_time=60      # needs `pip install atheris`

``TestOneInput`` also runs without atheris (tests/test_retrieval_io.py feeds it mutated files).
"""

from __future__ import annotations

import os
import sys
import tempfile

_DIR = tempfile.mkdtemp(prefix="vlk-fuzz-emb-")


def TestOneInput(data: bytes) -> None:
    from vlkernels.retrieval.io import Embeddings

    if not data:
        return
    # The first byte picks the format (and, for safetensors, whether a key is asked for); the rest is the file.
    suffix = ".npy" if data[0] & 1 else ".safetensors"
    key = "emb" if data[0] & 2 and suffix == ".safetensors" else None
    path = os.path.join(_DIR, "input" + suffix)
    with open(path, "wb") as f:
        f.write(data[1:])
    try:
        e = Embeddings(path, "fuzz", key)
    except ValueError as err:
        if path not in str(err):
            raise AssertionError(f"error does not name the file: {err}") from err
        return
    n, d = e.shape
    if n and d:
        # Reading rows must work for anything accepted: first and last chunk.
        a = e.chunk(0, min(n, 4))
        b = e.chunk(max(0, n - 4), n)
        if a.shape != (min(n, 4), d) or b.shape != (min(n, 4), d):
            raise AssertionError(f"chunks of an ({n}, {d}) file came back as {tuple(a.shape)}, {tuple(b.shape)}")


def main() -> None:
    import atheris

    with atheris.instrument_imports():
        import vlkernels.retrieval.io  # noqa: F401
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
