"""Retrieval API and CLI edges: mixed dtypes, ks as an int, one-direction ground truth, strict labels, unwritable
output, malformed embedding files, huge k. Each error is a named ValueError; numbers against the plain reference."""

import importlib.util
import io
import json
import random
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save, save_file

from vlkernels.cli import main as cli_main
from vlkernels.retrieval import Embeddings, Positives, evaluate, topk
from vlkernels.retrieval.reference import evaluate_ref, topk_ref

FUZZ = Path(__file__).resolve().parents[1] / "fuzz" / "fuzz_embedding_readers.py"


def _data(n_img=9, n_txt=20, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(n_img, d, generator=g, dtype=torch.float64)
    lab = np.arange(n_txt) % n_img
    txt = img[torch.from_numpy(lab)] + 0.7 * torch.randn(n_txt, d, generator=g, dtype=torch.float64)
    return img, txt, lab


@pytest.mark.parametrize("which", ["images", "texts"])
def test_evaluate_mixed_fp32_fp64_promotes(which):
    img, txt, lab = _data()
    # Each fp32 input is exactly representable in fp64: promoting it gives the fp64 reference on the fp32 values.
    img32, txt32 = img.float(), txt.float()
    args = (img, txt32) if which == "texts" else (img32, txt)
    want = evaluate_ref(args[0].double(), args[1].double(), lab)
    assert evaluate(*args, lab) == want
    v, i = topk(args[1], args[0], 4)
    rv, ri = topk_ref(args[1].double(), args[0].double(), 4)
    assert v.dtype == torch.float64 and torch.equal(i, ri) and torch.equal(v, rv)


def test_cli_mixed_dtypes_files(tmp_path, capsys):
    img, txt, lab = _data()
    np.save(tmp_path / "img.npy", img.float().numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    (tmp_path / "gt.json").write_text(json.dumps({"text_to_image": lab.tolist()}))
    out = tmp_path / "o.json"
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json"), "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == evaluate_ref(img.float().double(), txt, lab)


def test_ks_int_and_bad_ks():
    img, txt, lab = _data()
    assert evaluate(img, txt, lab, ks=5) == evaluate_ref(img, txt, lab, ks=(5,))
    for bad in ("5", 2.5, [1, 2.0], [], None, [True]):
        with pytest.raises(ValueError, match="ks must be"):
            evaluate(img, txt, lab, ks=bad)


def test_one_direction_gt_names_derived_direction(tmp_path, capsys):
    img, txt, _ = _data()
    with pytest.raises(ValueError, match=r"image_to_text: 8 evaluated .*derived as the transpose of t2i.*--empty"):
        evaluate(img, txt, t2i=Positives.from_pairs([0], [0], 20, 9, queries=[0]))
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    (tmp_path / "gt.json").write_text(json.dumps({"t2i": {"0": [0]}}))
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json")]) == 2
    err = capsys.readouterr().err
    assert "image_to_text" in err and "derived" in err and "--empty" in err
    out = tmp_path / "o.json"
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json"), "--empty", "skip", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    # Skipped: image 0 is the one image query with a positive (text 0), text 0 the one text query.
    s = (img @ txt.T).numpy()
    rank_i2t = 1 + int(np.sum(s[0] > s[0, 0]))
    rank_t2i = 1 + int(np.sum(s[:, 0] > s[0, 0]))
    assert got["image_to_text"]["MeanR"] == rank_i2t and got["text_to_image"]["MeanR"] == rank_t2i


@pytest.mark.parametrize(
    "gt,match",
    [
        ({"text_to_image": [0.5] * 20}, r"text_to_image\[0\] must be an integer index, got 0.5"),
        ({"text_to_image": [2.7] + [0] * 19}, r"text_to_image\[0\] must be an integer index, got 2.7"),
        ({"text_to_image": ["3"] + [0] * 19}, r"gt.json: text_to_image\[0\] must be an integer index"),
        ({"text_to_image": [[1, 2]] + [0] * 19}, r"text_to_image\[0\] must be an integer"),
        ({"text_to_image": {"a": 1}}, "must be a list of image indices"),
        ({"t2i": {"0": [0.5]}}, r"gt.json: 't2i'\['0'\]\[0\] must be an integer index"),
        ({"t2i": {"x": [0]}}, r"'t2i' key 'x' is not an integer"),
        ({"t2i": {"0": 3}}, r"'t2i'\['0'\] must be a list"),
        ({"t2i": {"0": [{"a": 1}]}}, "must be an integer index"),
        ({"t2i": [[0]]}, "'t2i' must map query index"),
        ({"i2t": {"0": [99]}}, "'i2t'.*out of range"),
        ({"t2i": {"0": [10**23]}}, r"'t2i'\['0'\]\[0\] = 100000000000000000000000\.\.\. is out of range"),
        ({"t2i": {str(10**23): [0]}}, r"'t2i' key 100000000000000000000000\.\.\. is out of range"),
        ({"t2i": {" 1 ": [0]}}, r"'t2i' key ' 1 ' is not an integer"),
        ({"t2i": {"1_0": [0]}}, r"'t2i' key '1_0' is not an integer"),
        ({"t2i": {"\u0661": [0]}}, r"'t2i' key '.' is not an integer"),
        ({"text_to_image": [0] * 20, "t2i": {"0": [0]}}, "either 'text_to_image' or 't2i'/'i2t', not both"),
        # A misspelt direction was dropped, and that direction derived from the other one.
        ({"t2i": {"0": [0]}, "I2T": {"0": [0]}}, r"unknown key\(s\) 'I2T'; expected 'text_to_image', or 't2i'"),
        ({"text_to_image": [0] * 20, "texts_to_image": [0] * 20}, r"unknown key\(s\) 'texts_to_image'"),
        ({"text_to_image": [0] * 19 + [9]}, r"gt.json: text_to_image\[19\] = 9 is out of range \[0, 9\)"),
        ({"text_to_image": [0] * 19}, r"gt.json: 'text_to_image' has 19 entries; expected one per text \(20\)"),
    ],
)
def test_cli_gt_labels_strict(tmp_path, capsys, gt, match):
    img, txt, _ = _data()
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json")]) == 2

    assert re.search(match, capsys.readouterr().err)


@pytest.mark.parametrize(
    "text,key",
    [('{"t2i": {"0": [0], "0": [1]}}', "0"), ('{"t2i": {"0": [0]}, "t2i": {"1": [1]}}', "t2i")],
)
def test_cli_gt_repeated_key_refused(tmp_path, capsys, text, key):
    """json.loads keeps the last of a repeated key: the first one's positives would vanish without a word."""
    img, txt, _ = _data()
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    (tmp_path / "gt.json").write_text(text)
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json"), "--empty", "skip"]) == 2
    assert f"key '{key}' appears more than once" in capsys.readouterr().err


def test_cli_json_is_strict_json(tmp_path, capsys):
    """A metric that is NaN (no query of a direction has a positive) is written as null, not a bare NaN token."""
    img, txt, _ = _data()
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    (tmp_path / "gt.json").write_text(json.dumps({"t2i": {"0": []}}))
    out = tmp_path / "o.json"
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json"), "--empty", "zero", "--json", str(out)]) == 0

    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")

    got = json.loads(out.read_text(), parse_constant=refuse)
    assert got["text_to_image"]["MeanR"] is None and got["text_to_image"]["R@1"] == 0.0


def test_positive_lists_and_indices_refused_by_name():
    q = torch.eye(3)
    for call in (
        lambda: evaluate(q, q, t2i=[0, 1, 2]),
        lambda: topk(q, q, 2, exclude=[0, 1, 2]),
    ):
        with pytest.raises(ValueError, match=r"one list of gallery indices per query; entry 0 is 0 \(int\)"):
            call()
    with pytest.raises(ValueError, match="past the int64 range"):
        evaluate(q, q, np.array([0, 1, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(ValueError, match="past the int64 range"):
        topk(q, q, 2, exclude=np.array([[0, 2**64 - 1]], dtype=np.uint64))


@pytest.mark.parametrize("screen", ["auto", "fp32"])
def test_fp64_scores_past_overflow_refused(screen):
    """Finite fp64 inputs whose scores overflow float64 (1e200 * 1e200): the ranks of inf and -inf scores are not
    defined by the inputs' order; refused on every path, while inputs just below the limit rank exactly."""
    q = torch.tensor([[1e200]], dtype=torch.float64)
    g = torch.tensor([[1e200], [1e100], [-1e200]], dtype=torch.float64)
    with pytest.raises(ValueError, match="float64 scores could overflow"):
        topk(q, g, 3, screen=screen)
    with pytest.raises(ValueError, match="float64 scores could overflow"):
        evaluate(g, q.expand(3, 1), [0, 1, 2])
    big = torch.tensor([[1e153, 1e153]], dtype=torch.float64)
    gal = torch.tensor([[1e153, 0.0], [1e153, 1e153], [-1e153, 1e153]], dtype=torch.float64)
    v, i = topk(big, gal, 3, screen=screen)
    rv, ri = topk_ref(big, gal, 3)
    assert torch.equal(i, ri) and torch.equal(v, rv)


def test_cli_nested_json_and_bad_output_path(tmp_path, capsys):
    img, txt, lab = _data()
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    assert cli_main([*argv, "--gt", str(tmp_path / "deep.json")]) == 2
    assert "cannot read ground truth" in capsys.readouterr().err
    (tmp_path / "gt.json").write_text(json.dumps({"text_to_image": lab.tolist()}))
    for target, match in [("nonexistent/dir/out.json", "does not exist"), (".", "is a directory")]:
        assert cli_main([*argv, "--gt", str(tmp_path / "gt.json"), "--json", str(tmp_path / target)]) == 2
        captured = capsys.readouterr()
        assert match in captured.err and "text_to_image" not in captured.out  # refused before computing


def test_topk_huge_k_clamped_to_gallery():
    _, txt, _ = _data()
    img = torch.randn(7, 8, dtype=torch.float64)
    v, i = topk(txt, img, 10**10)
    rv, ri = topk_ref(txt, img, 7)
    assert v.shape == (20, 7) and torch.equal(i, ri) and torch.equal(v, rv)
    v, i = topk(txt, img, 10**10, exclude=[[0, 1]] * 20)  # fewer candidates than M: padded, faiss-style
    assert torch.all(i[:, 5:] == -1) and torch.all(v[:, 5:] == float("-inf"))


def _st_header(header: dict, payload: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + payload


@pytest.mark.parametrize(
    "name,content,match",
    [
        ("short.safetensors", b"\x01\x02", "too short"),
        ("hlen.safetensors", struct.pack("<Q", 1 << 40) + b"{}", "exceeds the file"),
        ("notjson.safetensors", struct.pack("<Q", 3) + b"{x}", "not UTF-8 JSON"),
        ("utf.safetensors", struct.pack("<Q", 2) + b"\xff\xfe", "not UTF-8 JSON"),
        ("list.safetensors", _st_header([1]), "header is a JSON list"),
        ("nooff.safetensors", _st_header({"e": {"dtype": "F32", "shape": [1, 1]}}), "'data_offsets'"),
        ("info.safetensors", _st_header({"e": 5}), "needs an object"),
        ("shape.safetensors", _st_header({"e": {"dtype": "F32", "shape": "x", "data_offsets": [0, 4]}}), "shape"),
        ("neg.safetensors", _st_header({"e": {"dtype": "F32", "shape": [-1, 1], "data_offsets": [0, 4]}}), "shape"),
        ("dt.safetensors", _st_header({"e": {"dtype": [1], "shape": [1, 1], "data_offsets": [0, 4]}}), "dtype"),
        ("off.safetensors", _st_header({"e": {"dtype": "F32", "shape": [1, 1], "data_offsets": [0]}}), "[begin, end]"),
        ("past.safetensors", _st_header({"e": {"dtype": "F32", "shape": [1, 1], "data_offsets": [0, 4]}}), "outside"),
        (
            "size.safetensors",
            _st_header({"e": {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 4]}}, b"1234"),
            "does not match its shape",
        ),
        ("empty.npy", b"", "not a plain numeric .npy"),
        ("magic.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'", "not a plain numeric .npy"),
        ("trunc.npy", None, "not a plain numeric .npy"),
        ("token.npy", b"\x93NUMPY\x01\x00\x0a\x00{'descr':\n", "not a plain numeric .npy"),
    ],
)
def test_malformed_files_named_errors(tmp_path, name, content, match):
    if content is None:
        buf = io.BytesIO()
        np.save(buf, np.ones((50, 4), dtype=np.float32))
        content = buf.getvalue()[:-17]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match) as e:
        Embeddings(path, "images")
    assert str(path) in str(e.value)


def test_fuzz_target_on_mutated_files():
    """The atheris target's contract (ValueError naming the file, or a readable matrix) on 600 mutated files."""
    spec = importlib.util.spec_from_file_location("fuzz_embedding_readers", FUZZ)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    buf = io.BytesIO()
    np.save(buf, np.arange(12, dtype=np.float32).reshape(3, 4))
    seeds = [
        b"\x01" + buf.getvalue(),
        b"\x00" + save({"x": torch.ones(2, 3)}),
        b"\x02" + save({"emb": torch.ones(2, 3, dtype=torch.bfloat16), "o": torch.zeros(1)}),
    ]
    rng = random.Random(0)
    for n in range(600):
        data = bytearray(seeds[n % 3])
        for _ in range(rng.randint(1, 4)):
            op, at = rng.randrange(3), rng.randrange(1, len(data))
            if op == 0:
                data[at] = rng.randrange(256)
            elif op == 1:
                del data[at : at + rng.randint(1, 16)]
            else:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        mod.TestOneInput(bytes(data))
    save_file({"emb": torch.ones(2, 3)}, str(Path(mod._DIR) / "ok.safetensors"))  # the target's folder stays usable


# The C++ entry points of the CPU engine, called directly with wrong tensors: each is a named ValueError/TypeError,
# never an out-of-bounds read (this file runs under ASan in tests/test_build.py).
def _bad_binding_cases():
    s = torch.randn(6, 5)
    pos, thr, cnt = torch.zeros(2, 5, dtype=torch.int64), torch.zeros(2, 5), torch.zeros(2, 5, dtype=torch.int64)
    vals, idx = torch.full((6, 3), float("-inf")), torch.full((6, 3), -1, dtype=torch.int64)
    ptr, lim, thr1, out1 = (
        torch.tensor([0, 1, 2, 3, 4, 5, 6]),
        torch.arange(6),
        torch.zeros(6),
        torch.zeros(6, dtype=torch.int64),
    )
    ro = np.zeros((6, 3), dtype=np.int64)
    ro.flags.writeable = False
    tile, exact, upd, srt = "certified_tile", "exact_pairs", "topk_update", "topk_sort"
    t6, t5 = torch.zeros(4, 6, dtype=torch.float64), torch.zeros(4, 5, dtype=torch.float64)
    return [
        (
            tile,
            (s.half(), s, s[:5], t6, t5, 0.0, None, None, None, None, 0, None, None, None, 0),
            ValueError,
            "scores has dtype float16",
        ),
        (
            tile,
            (s, s[:5], s[:5], t6, t5, 0.0, None, None, None, None, 0, None, None, None, 0),
            ValueError,
            "row_data must have size 6",
        ),
        (
            tile,
            (s, s, s[:5], t6[:, :5], t5, 0.0, None, None, None, None, 0, None, None, None, 0),
            ValueError,
            "row_terms must have size 6",
        ),
        (
            tile,
            (s, s, s[:5], t6, t5, 0.0, ptr.flip(0), lim, thr1.double(), out1, 0, None, None, None, 0),
            ValueError,
            "row_ptr must be non-decreasing",
        ),
        (
            tile,
            (s, s, s[:5], t6, t5, 0.0, None, None, None, None, 0, pos, thr.double(), cnt[:1], 0),
            ValueError,
            "col_cnt must have size 2",
        ),
        (tile, (s, s, s[:5], t6, t5, -1.0, None, None, None, None, 0, None, None, None, 0), ValueError, "rel"),
        (exact, (s, s[:, :4], lim, lim, thr1.double()), ValueError, "same D"),
        (exact, (s, s, lim, lim + 1, thr1.double()), ValueError, "gi holds 6 at 5"),
        (exact, (s, s, lim, lim, thr1), ValueError, "out has dtype float32"),
        (upd, (s, 0, None, vals[:5], idx), ValueError, "vals must have size 6"),
        (upd, (s, 0, None, vals, idx[:, :2]), ValueError, r"idx must have size 3 in dimension 1"),
        (upd, (s, 0, None, vals.double(), idx), ValueError, "vals has dtype float64"),
        (upd, (s, 0, torch.zeros(6, 4, dtype=torch.int64), vals, idx), ValueError, "cand_idx must have size 5"),
        (upd, (s, 0, None, vals, ro), ValueError, "idx is read-only"),
        (upd, ([[1.0]], 0, None, vals, idx), TypeError, "scores must be a tensor or array supporting DLPack"),
        (srt, (vals, idx[:4]), ValueError, "idx must have size 6"),
        (srt, (vals.T, idx), ValueError, "vals must be contiguous"),
        (srt, (vals.int(), idx), ValueError, "vals has dtype int32"),
        # count_above's CSR form (retrieval's row queries): the pair ranges must lie inside thresholds and out.
        (
            "count_above",
            (s, thr1[:4], out1[:4], False, 0, 0, ptr, None, 0),
            ValueError,
            r"row_ptr must lie in \[0, 4\]",
        ),
        (
            "count_above",
            (s, thr1, out1, False, 0, 0, ptr.flip(0), None, 0),
            ValueError,
            "row_ptr must lie|non-decreasing",
        ),
        (
            "count_above",
            (s, thr1, out1, False, 0, 0, torch.tensor([0, 2, 1, 3, 4, 5, 6]), None, 0),
            ValueError,
            "non-decreasing",
        ),
        ("count_above", (s, thr1, out1, False, 0, 0, ptr[:6], None, 0), ValueError, "row_ptr must have size 7"),
        ("count_above", (s, thr1, out1, False, 0, 0, ptr, lim[:5], 0), ValueError, "limit must have size 6"),
        ("count_above", (s, thr1, out1, False, 0, 0, ptr, lim, -1), ValueError, "col0"),
        ("count_above", (s, thr1, out1, False, 0, 0, None, lim, 0), ValueError, "limit needs row_ptr"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_binding_cases())))
def test_retrieval_bindings_reject_bad_tensors(case):
    from vlkernels import _ext

    name, args, exc, match = _bad_binding_cases()[case]
    with pytest.raises(exc, match=match):
        getattr(_ext.load(), name)(*args)


def test_count_above_csr_matches_numpy():
    # Row i's pairs e: candidates above thr[e], ties counted before column limit[e] (the tie policy), vs a plain loop.
    from vlkernels import _ext

    rng = np.random.default_rng(3)
    s = rng.integers(-3, 4, size=(40, 70)).astype(np.float32)  # many exact ties
    counts = rng.integers(0, 4, size=40)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = np.repeat(np.arange(40), counts)
    lim = rng.integers(-5, 80, size=len(rows)) + 100  # global column indices, col0 = 100
    thr = s[rows, np.clip(lim - 100, 0, 69)]
    out = np.full(len(rows), 7, dtype=np.int64)  # counts add
    _ext.load().count_above(s, thr, out, False, row_ptr=ptr, limit=lim, col0=100)
    want = [7 + sum(v >= t if 100 + j < li else v > t for j, v in enumerate(s[r])) for r, t, li in zip(rows, thr, lim)]
    np.testing.assert_array_equal(out, want)


def test_bindings_accept_empty_numpy_arrays():
    # numpy gives size-0 arrays stride 0: nothing is read, so no layout is required of them.
    from vlkernels import _ext

    C = _ext.load()
    s, none = np.ones((3, 4), dtype=np.float32), np.zeros(0, dtype=np.float32)
    out = np.zeros(0, dtype=np.int64)
    C.count_above(s, none, out, False, row_ptr=np.zeros(4, dtype=np.int64), limit=np.zeros(0, dtype=np.int64))
    C.count_above(np.ones((0, 4), dtype=np.float32), none, out, False)
    C.topk_sort(np.zeros((0, 3), dtype=np.float32), np.zeros((0, 3), dtype=np.int64))
