"""CIDEr-D and original CIDEr with pycocoevalcap's interface, and the SCST reward object CiderD."""

from __future__ import annotations

import codecs
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from vlkernels.captioning._common import check_dicts, load, log_table, ref_len_of, score_images
from vlkernels.captioning._text import porter_stemmer

_DF_FORMAT = "vlkernels.cider_document_frequency"
_NO_REFERENCE_WORDS = "every reference caption is empty: no document frequency (pycocoevalcap fails too)"


class Cider:
    r"""CIDEr-D exactly as pycocoevalcap 1.2 ``Cider`` (a drop-in: same arguments, same outputs, same numbers).

    .. math::
        \mathrm{CIDEr\text{-}D}(c, S) = \frac{10}{N}\sum_{n=1}^{N}\frac{1}{|S|}\sum_{s\in S}
        e^{-\frac{(\ell_c-\ell_s)^2}{2\sigma^2}}\,
        \frac{\sum_g \min(g^n(c), g^n(s))\,g^n(s)}{\lVert g^n(c)\rVert\,\lVert g^n(s)\rVert}

    with TF-IDF vectors :math:`g^n(x)_k = \mathrm{tf}_k(x)\,(\log|I| - \log\max(1, \mathrm{df}_k))`, df counted
    over the references of the images scored together (Vedantam et al., CVPR 2015). :math:`\ell` is pycocoevalcap's
    "length": the number of bigrams of the caption (not of words).

    Args:
        n: largest n-gram length (1..4), default 4.
        sigma: standard deviation of the Gaussian length penalty, default 6.0.
        tokenize: when True, ``compute_score`` takes raw captions (str or ``{"caption": str}``) and runs the PTB
            tokenizer first, as ``COCOEvalCap`` does; default False (pre-tokenized input, like pycocoevalcap).
        stem: Porter-stem every token first (nltk's PorterStemmer), as in the CIDEr paper; default False.

    Note:
        float64, CPU, deterministic; per-image scores equal pycocoevalcap's to the last bit on the same numpy (the
        accumulation order of every sum is kept). Multithreaded C++ (``vlkernels.set_num_threads``), GIL released.

    Example:
        >>> Cider().compute_score({1: ["a dog runs"]}, {1: ["a dog runs"]})[1].shape
        (1,)
    """

    _cider_d = True

    def __init__(self, n: int = 4, sigma: float = 6.0, *, tokenize: bool = False, stem: bool = False) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4:
            raise ValueError(f"n must be an int in [1, 4], got {n!r}")
        self._n = n
        self._sigma = float(sigma)
        if self._cider_d:
            _check_sigma(self._sigma)
        self._tokenize = tokenize
        self._stem = stem

    def compute_score(self, gts: Mapping[Any, list], res: Mapping[Any, list]) -> tuple[np.float64, np.ndarray]:
        """Corpus CIDEr and per-image scores.

        Args:
            gts: ``{image_id: [reference caption, ...]}`` (at least one reference per image).
            res: ``{image_id: [candidate caption]}`` (exactly one candidate per image; "" is legal and scores 0),
                with the same image ids as ``gts``.

        Returns:
            ``(mean, scores)``: ``scores`` is a float64 array with one score per image in the order of
            ``gts``' keys, ``mean`` its ``np.mean``.

        Raises:
            ValueError: different image ids, a value that is not a list, not exactly one candidate, no
                reference, a caption that is not a str or not encodable as UTF-8, all references empty
                (the message names the image; pycocoevalcap raises AssertionError on the same inputs).
        """
        gts, res = check_dicts(gts, res)
        if not gts:
            raise ValueError("gts and res are empty: no image to score")
        out = score_images(
            gts,
            res,
            load().CAP_CIDER,
            tokenize=self._tokenize,
            n=self._n,
            sigma=self._sigma,
            cider_d=self._cider_d,
            stem=porter_stemmer() if self._stem else None,
        )
        if not out["any_ref_words"]:
            raise ValueError(_NO_REFERENCE_WORDS)
        scores = out["cider"]
        return np.mean(scores), scores

    def method(self) -> str:
        return "CIDEr"


class CiderOriginal(Cider):
    r"""Original CIDEr (vrama91/cider ``Cider``; no clipping, no length penalty), pycocoevalcap-style interface.

    .. math::
        \mathrm{CIDEr}(c, S) = \frac{10}{N}\sum_{n=1}^{N}\frac{1}{|S|}\sum_{s\in S}
        \frac{g^n(c)\cdot g^n(s)}{\lVert g^n(c)\rVert\,\lVert g^n(s)\rVert}

    Args, Returns, Raises and Note as :class:`Cider` (``sigma`` is accepted and ignored).

    Example:
        >>> float(CiderOriginal().compute_score({1: ["a b"], 2: ["c d"]}, {1: ["a b"], 2: ["x"]})[0]) > 0
        True
    """

    _cider_d = False


def _check_sigma(sigma: float) -> None:
    # pycocoevalcap divides by 2 * sigma**2 (ZeroDivisionError at 0, also where the square underflows to 0 (sigma
    # 1e-200); NaN scores for NaN).
    if isinstance(sigma, bool) or not (sigma > 0 and 2 * sigma * sigma > 0):
        raise ValueError(
            f"sigma must be a positive number whose 2 sigma^2 is not 0 (the length penalty's standard deviation), "
            f"got {sigma!r}"
        )


def _as_int_rows(x: Any, where: str) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, any device
        x = x.detach().cpu().numpy()
    if isinstance(x, (list, tuple)) and any(isinstance(c, str) for c in x):
        raise ValueError(f"{where}: str captions mixed with token ids; give one kind for all captions")
    a = np.asarray(x)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise ValueError(f"{where}: token ids must be a 2-D integer array (rows, T), got shape {a.shape} {a.dtype}")
    if a.dtype == np.uint64 and a.size and int(a.max()) >= 2**63:
        raise ValueError(f"{where}: token ids must be below 2**63, got {int(a.max())}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _id_source(rows: list[np.ndarray], eos: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data, starts, lens) of token-id rows cut after their first EOS (kept, as ruotianluo's array_to_str)."""
    data = np.concatenate([r.reshape(-1) for r in rows]) if rows else np.zeros(0, np.int64)
    widths = np.concatenate([np.full(r.shape[0], r.shape[1], np.int64) for r in rows]) if rows else data[:0]
    starts = np.zeros(len(widths), np.int64)
    if len(widths) > 1:
        starts[1:] = np.cumsum(widths)[:-1]
    lens = widths.copy()
    if eos is not None:
        for r, (s, e) in zip(rows, _row_spans(rows)):
            if r.size:
                hit = r == eos
                has = hit.any(axis=1)
                lens[s:e] = np.where(has, hit.argmax(axis=1) + 1, r.shape[1])
    return data, starts, lens


def _row_spans(rows: list[np.ndarray]) -> list[tuple[int, int]]:
    out, pos = [], 0
    for r in rows:
        out.append((pos, pos + r.shape[0]))
        pos += r.shape[0]
    return out


def _is_text(captions: Any) -> bool:
    """Whether a caption collection holds str captions (decided by its first caption; the rest is checked later)."""
    return isinstance(captions, (list, tuple)) and bool(captions) and isinstance(captions[0], str)


def _source(captions: Any, where: str, eos: int | None) -> tuple[Any, int]:
    """A caption source for the C++ layer: a list of str (checked there), or (data, starts, lens) for token-id rows."""
    if _is_text(captions) or (isinstance(captions, (list, tuple)) and not captions):
        return list(captions), len(captions)
    rows = _as_int_rows(captions, where)
    src = _id_source([rows], eos)
    return src, rows.shape[0]


class CiderD:
    r"""CIDEr-D with fixed document frequencies: per-candidate rewards for self-critical training (SCST).

    Scores like ruotianluo/cider ``CiderD(df=...)`` (pycocoevalcap arithmetic with the document frequencies and
    :math:`\log(\text{num\_docs})` of a fixed corpus, e.g. the training references).

    Args:
        refs: the corpus: a sequence with one entry per image (document), each a list of reference captions
            (str) or a 2-D integer array of token ids (rows, T); or a dict ``{image_id: refs}``. Omit it to use
            :meth:`from_document_frequency` or :meth:`load`.
        n: largest n-gram length (1..4), default 4.
        sigma: Gaussian length-penalty standard deviation, default 6.0.
        eos: token id ending an id sequence (default 0, ruotianluo's convention): ids after the first EOS are
            ignored and the EOS itself is kept as a token, exactly as ruotianluo's ``array_to_str``; None uses
            every id. Strings are split on whitespace as given (no EOS handling).

    Note:
        Token ids are words spelled by their decimal digits (``[5, 9, 0]`` = ``"5 9 0"``), so id and string
        inputs, and document frequencies saved from either, are interchangeable. float64, deterministic,
        multithreaded over reference groups with the GIL released.

    Example:
        >>> scorer = CiderD([["a dog runs", "a dog running"], ["a cat sleeps"]])
        >>> scorer.score(["a dog runs", "a cat"], [["a dog runs"], ["a cat sleeps"]]).shape
        (2,)
    """

    def __init__(self, refs: Any = None, *, n: int = 4, sigma: float = 6.0, eos: int | None = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4:
            raise ValueError(f"n must be an int in [1, 4], got {n!r}")
        self.sigma = float(sigma)
        _check_sigma(self.sigma)
        self.eos = eos
        self._init_table(0)
        if refs is None:
            self._df = load().CapCiderDf(n)
            return
        groups = list(refs.values()) if isinstance(refs, Mapping) else list(refs)
        if not groups:
            raise ValueError("refs is empty: the corpus needs at least one image")
        names = list(refs.keys()) if isinstance(refs, Mapping) else list(range(len(groups)))
        src, off = self._groups(groups, names, "refs")
        self._df = load().CapCiderDf(n, src, off, names)
        self._docs = self._df_bound = len(groups)

    def _init_table(self, num_docs: int, df_bound: int = 0) -> None:
        # The numpy logarithms a score needs (np.log(max(1, df)) for every df up to df_bound, a bound of the table's
        # largest df, and ref_len = np.log(num_docs)) are kept here beside the table and passed into C++, which
        # never calls back into Python while it holds the table's lock. The lock keeps the table's size and the
        # logarithms in step: add_documents and score hold it across their C++ call (its wait releases the GIL).
        self._lock = threading.Lock()
        self._docs, self._df_bound = num_docs, df_bound
        self._logs: tuple[int, np.ndarray, float] | None = None

    def add_documents(self, refs: Any) -> None:
        """Adds documents (images) to the corpus: ``refs`` as in the constructor (a sequence of reference groups
        or a dict). Safe beside concurrent :meth:`score` calls on other threads (each sees the table before or
        after the addition, never a mix)."""
        groups = list(refs.values()) if isinstance(refs, Mapping) else list(refs)
        names = list(refs.keys()) if isinstance(refs, Mapping) else list(range(len(groups)))
        src, off = self._groups(groups, names, "refs")
        with self._lock:
            self._df.add_documents(src, off, names)
            # A document adds at most 1 to an n-gram's df.
            self._docs += len(groups)
            self._df_bound += len(groups)

    def _log_tables(self) -> tuple[int, np.ndarray, float]:
        """(num_docs, log table, ref_len) for the table as it is now (call holding self._lock)."""
        if self._logs is None or self._logs[0] != self._docs:
            if self._docs < 1:
                raise ValueError("no document frequencies: build CiderD from refs, a dict, or load()")
            self._logs = (self._docs, log_table(self._df_bound), ref_len_of(self._docs))
        return self._logs

    @property
    def n(self) -> int:
        return int(self._df.n)

    @property
    def num_docs(self) -> int:
        """Number of documents (images) of the corpus; ref_len = log(num_docs)."""
        return int(self._df.num_docs)

    def __len__(self) -> int:
        return len(self._df)

    @classmethod
    def from_document_frequency(
        cls,
        document_frequency: Mapping[Any, float],
        num_docs: int,
        *,
        n: int = 4,
        sigma: float = 6.0,
        eos: int | None = 0,
    ) -> CiderD:
        """Builds the scorer from ``{ngram: df}`` (keys: tuples of words as in ruotianluo's pickled
        ``document_frequency``, or space-joined strings) and the number of documents (its ``ref_len``)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4:
            raise ValueError(f"n must be an int in [1, 4], got {n!r}")
        if isinstance(num_docs, bool) or not isinstance(num_docs, (int, np.integer)) or not 1 <= num_docs < 2**32:
            raise ValueError(f"num_docs must be an int in [1, 2**32), got {num_docs!r}")
        ngrams, counts = [], []
        for k, v in document_frequency.items():
            if isinstance(k, tuple):
                if not all(isinstance(w, str) for w in k):
                    raise ValueError(f"document_frequency key {k!r}: words must be str")
                k = " ".join(k)
            if not isinstance(k, str):
                raise ValueError(f"document_frequency key {k!r}: expected a tuple of words or a str")
            bad_type = isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))
            if bad_type or v != v or v in (float("inf"), float("-inf")):
                raise ValueError(f"document_frequency[{k!r}] = {v!r}: expected a whole number in [0, num_docs]")
            if float(v) != int(v) or not 0 <= v <= num_docs:
                raise ValueError(
                    f"document_frequency[{k!r}] = {v!r}: expected a whole number in [0, num_docs = {num_docs}]"
                )
            ngrams.append(k)
            counts.append(int(v))
        seen = {}
        for k in ngrams:
            words = k.split()
            if not 1 <= len(words) <= n:
                raise ValueError(f"document_frequency key {k!r}: an n-gram must hold 1 to {n} words")
            # "a b" and "a  b" are one n-gram: two entries would merge silently (the later count winning).
            if seen.setdefault(" ".join(words), k) != k:
                raise ValueError(f"document_frequency keys {seen[' '.join(words)]!r} and {k!r} are the same n-gram")
        self = cls.__new__(cls)
        self.sigma = float(sigma)
        _check_sigma(self.sigma)
        self.eos = eos
        self._init_table(int(num_docs), max(counts, default=0))
        self._df = load().CapCiderDf.from_items(n, ngrams, np.asarray(counts, dtype=np.int64), int(num_docs))
        return self

    def document_frequency(self) -> dict[str, int]:
        """``{"w1 w2 ...": df}`` for every n-gram of the corpus."""
        table = self._df.export()
        return dict(zip(table["ngrams"], table["df"]))

    def save(self, path: str | os.PathLike) -> None:
        """Writes the document frequencies as JSON (no pickle): format, version, n, num_docs, ngrams, df."""
        table = self._df.export()
        doc = {
            "format": _DF_FORMAT,
            "version": 1,
            "n": table["n"],
            "num_docs": table["num_docs"],
            "ngrams": table["ngrams"],
            "df": table["df"],
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike, *, sigma: float = 6.0, eos: int | None = 0) -> CiderD:
        """Reads a file written by :meth:`save`. Raises ValueError on malformed JSON or a wrong layout."""
        doc = _read_json(path)
        if not isinstance(doc, dict) or doc.get("format") != _DF_FORMAT:
            raise ValueError(f"{path}: not a vlkernels document-frequency file (format != {_DF_FORMAT!r})")
        for key, typ in (("n", int), ("num_docs", int), ("ngrams", list), ("df", list)):
            if not isinstance(doc.get(key), typ):
                raise ValueError(f"{path}: field {key!r} missing or not {typ.__name__}")
        if len(doc["ngrams"]) != len(doc["df"]):
            raise ValueError(f"{path}: 'ngrams' and 'df' differ in length")
        bad = next((g for g in doc["ngrams"] if not isinstance(g, str)), None)
        if bad is not None:
            raise ValueError(f"{path}: 'ngrams' holds {json.dumps(bad)[:60]}; expected space-joined n-gram strings")
        if len(set(doc["ngrams"])) != len(doc["ngrams"]):
            raise ValueError(f"{path}: 'ngrams' lists an n-gram more than once")
        return cls.from_document_frequency(
            dict(zip(doc["ngrams"], doc["df"])), doc["num_docs"], n=doc["n"], sigma=sigma, eos=eos
        )

    def score(self, candidates: Any, refs: Any, ref_index: Any = None) -> np.ndarray:
        """CIDEr-D of every candidate against its references, with the corpus' document frequencies.

        Args:
            candidates: B captions: a list of str, or token ids (B, T) (numpy / torch, any device).
            refs: G reference groups: a list of lists of str, or of (R_g, T_g) id arrays, or one (G, R, T)
                array.
            ref_index: (B,) group of each candidate; default ``arange(B)`` (needs G == B). For ``k``
                samples per image use ``np.repeat(np.arange(G), k)``.

        Returns:
            float64 array (B,): the rewards, in candidate order.

        Raises:
            ValueError: mismatched lengths, a ref_index out of range, a group without references, captions
                that are not str / not integer arrays, invalid UTF-8.
        """
        hyp_src, b = _source(candidates, "candidates", self.eos)
        groups = list(refs)
        src, off = self._groups(groups, list(range(len(groups))), "refs")
        if ref_index is None:
            if len(groups) != b:
                raise ValueError(f"{b} candidates but {len(groups)} reference groups: pass ref_index")
            index = np.arange(b, dtype=np.int64)
        else:
            if hasattr(ref_index, "detach"):
                ref_index = ref_index.detach().cpu().numpy()
            index = np.asarray(ref_index)
            if index.size and not np.issubdtype(index.dtype, np.integer):  # 1.99 was read as 1, True as 1
                raise ValueError(f"ref_index must hold integers (group indices), got dtype {index.dtype}")
            index = np.ascontiguousarray(index, dtype=np.int64).reshape(-1)
            if index.shape[0] != b:
                raise ValueError(f"ref_index has {index.shape[0]} entries for {b} candidates")
            if b and (index.min() < 0 or index.max() >= len(groups)):
                raise ValueError(f"ref_index values must be in [0, {len(groups)}), got [{index.min()}, {index.max()}]")
        out = np.empty(b, np.float64)
        with self._lock:
            docs, logdf, ref_len = self._log_tables()
            self._df.score(hyp_src, src, off, index, self.sigma, logdf, ref_len, docs, out)
        return out

    def _groups(self, groups: list, names: list, where: str) -> tuple[Any, np.ndarray]:
        """Flattens reference groups into one caption source and group offsets. The first caption decides the kind
        (str or token ids); every group must then hold that kind (str captions are checked by the C++ reader)."""
        sizes = []
        first = next((g for g in groups if not isinstance(g, (list, tuple)) or g), None)
        if _is_text(first):
            flat: list = []
            for name, g in zip(names, groups):
                if not isinstance(g, (list, tuple)):
                    raise ValueError(
                        f"{where}[{name!r}]: expected a list of str captions like the other groups, "
                        f"got {type(g).__name__}"
                    )
                if g and not isinstance(g[0], str):
                    raise ValueError(f"{where}[{name!r}]: str captions mixed with token ids; give one kind for all")
                flat.extend(g)
                sizes.append(len(g))
            src: Any = flat
        else:
            rows = []
            for name, g in zip(names, groups):
                if isinstance(g, (list, tuple)) and not g:  # no caption (a 1-D empty array is one empty caption)
                    sizes.append(0)
                    continue
                r = _as_int_rows(g, f"{where}[{name!r}]")
                rows.append(r)
                sizes.append(r.shape[0])
            src = _id_source(rows, self.eos)
        empty = [nm for nm, s in zip(names, sizes) if s == 0]
        if empty:
            raise ValueError(f"{where}[{empty[0]!r}]: no reference captions")
        off = np.zeros(len(sizes) + 1, np.int64)
        off[1:] = np.cumsum(sizes)
        return src, off


def _read_json(path: str | os.PathLike) -> Any:
    """JSON from a file; every failure a ValueError naming the file. The bytes are dropped before parsing (a big
    file's text and its objects are what peak memory holds). UTF-8 only: a UTF-8 byte order mark is skipped (as
    ``json.loads`` does with bytes), UTF-16/UTF-32 text is refused by name -- the rules of the C++ file reader."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    if not bom and (
        raw[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
        or raw[:4] == codecs.BOM_UTF32_BE
        or raw[:1] == b"\0"
        or raw[1:2] == b"\0"
    ):
        raise ValueError(
            f"{path}: captions files must be UTF-8; this one looks like UTF-16 or UTF-32 (convert it to UTF-8)"
        )
    try:
        text = codecs.utf_8_decode(memoryview(raw)[bom:], "strict", True)[0]
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: invalid UTF-8 at byte {e.start + bom}") from None
    del raw
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read") from None
