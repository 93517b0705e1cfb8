"""Retrieval at scale and at the edges: memory-mapped files, bad input, the CLI, and sharding over real gloo groups."""

import json
import os

import numpy as np
import pytest
import torch
from gloo_ranks import run_ranks
from safetensors.torch import save_file

from vlkernels.cli import main as cli_main
from vlkernels.retrieval import Embeddings, Positives, evaluate, topk
from vlkernels.retrieval.reference import evaluate_ref, topk_ref


def _data(n_img=23, n_txt=71, d=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(n_img, d, generator=g)
    lab = np.arange(n_txt) % n_img
    txt = img[torch.from_numpy(lab)] + 0.8 * torch.randn(n_txt, d, generator=g)
    return img, txt, lab


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["npy", "safetensors"])
def test_evaluate_from_memory_mapped_files(tmp_path, dtype, fmt):
    img, txt, lab = _data()
    img, txt = img.to(dtype), txt.to(dtype)
    if fmt == "npy":
        if dtype == torch.bfloat16:
            pytest.skip("numpy has no bfloat16: bf16 files are safetensors")
        np.save(tmp_path / "img.npy", img.numpy())
        np.save(tmp_path / "txt.npy", txt.numpy())
    else:
        save_file({"emb": img}, str(tmp_path / "img.safetensors"))
        save_file({"emb": txt, "other": torch.zeros(2)}, str(tmp_path / "txt.safetensors"))
    src_t = Embeddings(tmp_path / f"txt.{fmt}", "texts", key="emb" if fmt == "safetensors" else None)
    assert src_t.dtype == dtype and src_t.array is not None  # mapped, not loaded
    got = evaluate(tmp_path / f"img.{fmt}", src_t, lab, chunk_rows=16)
    assert got == evaluate_ref(img.float(), txt.float(), lab)
    _, i = topk(txt, tmp_path / f"img.{fmt}", 5)
    _, ri = topk_ref(txt.float(), img.float(), 5)
    assert torch.equal(i, ri)


def test_fortran_order_files_and_arrays_equal_the_reference(tmp_path):
    """A Fortran-order .npy (np.save of a column-major array) and column-major in-memory arrays are plain matrices:
    every entry point reads them row-major, with the reference's answers."""
    img, txt, lab = _data()
    np.save(tmp_path / "img.npy", np.asfortranarray(img.numpy()))
    np.save(tmp_path / "txt.npy", np.asfortranarray(txt.numpy()))
    assert np.load(tmp_path / "img.npy", mmap_mode="r").flags.f_contiguous
    want = evaluate_ref(img, txt, lab)
    assert evaluate(tmp_path / "img.npy", tmp_path / "txt.npy", lab) == want
    assert evaluate(np.asfortranarray(img.numpy()), np.asfortranarray(txt.numpy()), lab) == want
    from vlkernels.retrieval import evaluate_stream

    assert dict(evaluate_stream(tmp_path / "img.npy", tmp_path / "txt.npy", lab, block_images=7)) == want
    v, i = topk(tmp_path / "txt.npy", tmp_path / "img.npy", 5)
    rv, ri = topk_ref(txt, img, 5)
    assert torch.equal(i, ri) and torch.equal(v, rv.float())


@pytest.mark.parametrize("dtype", [">f2", ">f4", ">f8"])
def test_big_endian_files_equal_the_reference(tmp_path, dtype):
    """numpy reads big-endian .npy files; so do the readers, chunk by chunk in the native byte order."""
    img, txt, lab = _data()
    np.save(tmp_path / "img.npy", img.numpy().astype(dtype))
    np.save(tmp_path / "txt.npy", txt.numpy().astype(dtype))
    native = np.dtype(dtype).newbyteorder("=")
    img_n, txt_n = (torch.from_numpy(x.numpy().astype(native)) for x in (img, txt))
    assert Embeddings(tmp_path / "img.npy").dtype == img_n.dtype
    assert evaluate(tmp_path / "img.npy", tmp_path / "txt.npy", lab) == evaluate_ref(img_n, txt_n, lab)
    _, i = topk(tmp_path / "txt.npy", tmp_path / "img.npy", 5)
    assert torch.equal(i, topk_ref(txt_n, img_n, 5)[1])


def _safetensors_with_header(path, header: str, data: bytes = b"") -> None:
    raw = header.encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def test_bad_files(tmp_path):
    np.save(tmp_path / "int.npy", np.zeros((3, 4), dtype=np.int32))
    np.save(tmp_path / "vec.npy", np.zeros(4, dtype=np.float32))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    save_file({"a": torch.zeros(2, 3), "b": torch.zeros(2, 3)}, str(tmp_path / "two.safetensors"))
    save_file({"a": torch.zeros(2, 3, 4)}, str(tmp_path / "three.safetensors"))
    save_file({"a": torch.zeros(2, 3, dtype=torch.int64)}, str(tmp_path / "long.safetensors"))
    (tmp_path / "x.pt").write_bytes(b"")
    cases = [
        ("int.npy", "dtype int32"),
        ("vec.npy", "2-D"),
        ("obj.npy", "not a plain numeric"),
        ("two.safetensors", "pass the key"),
        ("three.safetensors", "2-D"),
        ("long.safetensors", "dtype I64"),
        ("x.pt", "unsupported extension"),
        ("missing.npy", "does not exist"),
        ("huge.safetensors", r"huge.safetensors is not a valid safetensors file: .*beyond any array"),
        ("digits.safetensors", r"digits.safetensors is not a valid safetensors file: header is not UTF-8 JSON"),
    ]
    huge = {"a": {"dtype": "F32", "shape": [0, 2**70], "data_offsets": [0, 0]}}
    _safetensors_with_header(tmp_path / "huge.safetensors", json.dumps(huge))
    _safetensors_with_header(tmp_path / "digits.safetensors", '{"a": ' + "9" * 5000 + "}")
    for name, match in cases:
        with pytest.raises(ValueError, match=match):
            Embeddings(tmp_path / name, "images")


@pytest.mark.parametrize(
    "layout, match",
    [
        ({"e": [0, 32]}, "the tensors cover 32 of the 64 bytes"),  # trailing data: 4 rows stored, 2 declared
        ({"e": [32, 64]}, "starts at byte 32 of the data section, where the tensors before it end at 0"),
        ({"e": [0, 32], "f": [16, 48]}, "'f' starts at byte 16 .* end at 32 \\(a gap or an overlap\\)"),
        ({"e": [0, 32], "f": [40, 64]}, "'f' starts at byte 40"),
    ],
)
def test_safetensors_data_must_be_tiled_by_the_header(tmp_path, layout, match):
    """A header that describes part of the data section (trailing bytes, a gap, an overlap) is refused as the
    safetensors library's own reader refuses it, rather than read as fewer rows."""
    from safetensors import SafetensorError, safe_open

    header = {k: {"dtype": "F32", "shape": [2, 4], "data_offsets": v} for k, v in layout.items()}
    path = tmp_path / "e.safetensors"
    _safetensors_with_header(path, json.dumps(header), np.arange(16, dtype=np.float32).tobytes())
    with pytest.raises(SafetensorError):
        with safe_open(str(path), "np") as f:
            f.get_tensor("e")
    with pytest.raises(ValueError, match=f"not a valid safetensors file: .*{match}"):
        Embeddings(path, "images", key="e")
    _safetensors_with_header(path, json.dumps({"__metadata__": ["x"], **header}), b"")
    with pytest.raises(ValueError, match="__metadata__ must be an object of strings"):
        Embeddings(path, "images", key="e")


def test_evaluate_rejects_bad_input():
    img, txt, lab = _data()
    nan_img = img.clone()
    nan_img[3, 1] = float("nan")
    cases = [
        (dict(image_emb=img[:, :5], text_emb=txt, text_to_image=lab), "embedding dims differ"),
        (dict(image_emb=nan_img, text_emb=txt, text_to_image=lab), "NaN/Inf"),
        (dict(image_emb=img, text_emb=txt, text_to_image=np.where(lab == 0, 23, lab)), "out of range"),
        (dict(image_emb=img, text_emb=txt, text_to_image=np.where(lab == 0, -1, lab)), "out of range"),
        (dict(image_emb=img, text_emb=txt, text_to_image=np.where(lab == 5, 6, lab)), "no positive"),
        (dict(image_emb=img, text_emb=txt, text_to_image=lab[:-1]), "one image per text"),
        (dict(image_emb=img, text_emb=txt, text_to_image=lab.astype(float) + 0.5), "integers"),
        (dict(image_emb=img[:0], text_emb=txt[:0], text_to_image=lab[:0]), "empty input"),
        (dict(image_emb=img, text_emb=txt), "ground truth missing"),
        (dict(image_emb=img, text_emb=txt, text_to_image=lab, t2i=[[0]] * 71), "either text_to_image"),
        (dict(image_emb=img, text_emb=txt, text_to_image=lab, ks=(0, 5)), "ks must be positive"),
        (dict(image_emb=img, text_emb=txt, text_to_image=lab, backend="gpu"), "backend must be"),
        (dict(image_emb=img, text_emb=txt, text_to_image=lab, chunk_rows=0), "chunk_rows must be"),
        (dict(image_emb=img, text_emb=txt, text_to_image=lab, screen="fp16"), "screen must be"),
        (dict(image_emb=img.int(), text_emb=txt, text_to_image=lab), "float dtype"),
        (dict(image_emb=img[None], text_emb=txt, text_to_image=lab), "2-D"),
        (dict(image_emb=[[1.0]], text_emb=txt, text_to_image=lab), "torch.Tensor, numpy array"),
        (dict(image_emb=img, text_emb=txt, t2i=np.zeros((3, 3), dtype=np.int64)), r"shape \(P, 2\)"),
        (dict(image_emb=img, text_emb=txt, t2i=[[0]]), "one per query"),
        (dict(image_emb=img, text_emb=txt, t2i=(np.array([1, 2]), np.array([0]))), "indptr"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            evaluate(**kwargs)
    with pytest.raises(ValueError, match="num_relevant"):
        Positives.from_pairs([0], [0], 1, 2, num_relevant=[0])
    with pytest.raises(ValueError, match="twice"):
        Positives.from_pairs([0], [0], 1, 2, queries=[0, 0])


def test_topk_rejects_bad_input():
    img, txt, _ = _data()
    nan = txt.clone()
    nan[0, 0] = float("inf")
    cases = [
        (dict(queries=txt, gallery=img[:, :4], k=3), "embedding dims differ"),
        (dict(queries=nan, gallery=img, k=3), "NaN/Inf"),
        (dict(queries=txt, gallery=img, k=-1), "non-negative integer"),
        (dict(queries=txt, gallery=img, k=2.5), "non-negative integer"),
        (dict(queries=txt, gallery=img, k=3, exclude=np.array([[0, 23]])), "out of range"),
        (dict(queries=txt, gallery=img, k=3, backend="triton-gpu"), "backend must be"),
        (dict(queries=txt, gallery=img, k=3, chunk_gallery=0), "chunk_gallery must be"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            topk(**kwargs)


def test_cli_end_to_end(tmp_path, capsys):
    img, txt, lab = _data()
    np.save(tmp_path / "img.npy", img.numpy())
    save_file({"t": txt}, str(tmp_path / "txt.safetensors"))
    (tmp_path / "gt.json").write_text(json.dumps({"text_to_image": lab.tolist()}))
    out = tmp_path / "out.json"
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.safetensors")]
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json"), "--k", "1", "3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "text_to_image" in printed and "R@3" in printed and "mAP@R" in printed
    want = evaluate_ref(img, txt, lab, ks=(1, 3))
    assert json.loads(out.read_text()) == want
    # General positives: only the listed queries are evaluated.
    general = {"t2i": {"0": [0, 5], "7": [7]}, "i2t": {"0": [0, 23, 46], "3": [3]}}
    (tmp_path / "gen.json").write_text(json.dumps(general))
    assert cli_main([*argv, "--gt", str(tmp_path / "gen.json"), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    t2i = Positives.from_pairs([0, 0, 7], [0, 5, 7], 71, 23, queries=[0, 7])
    i2t = Positives.from_pairs([0, 0, 0, 3], [0, 23, 46, 3], 23, 71, queries=[0, 3])
    assert got == evaluate(img, txt, t2i=t2i, i2t=i2t)
    (tmp_path / "bad.json").write_text(json.dumps({"text_to_image": [99] * 71}))
    assert cli_main([*argv, "--gt", str(tmp_path / "bad.json")]) == 2
    assert "out of range" in capsys.readouterr().err


def _sharded_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        img, txt, lab = _data(n_img=31, n_txt=97, d=6, seed=11)
        img, txt = img.round(), txt.round()  # exact ties across shards
        bounds = [0, 40, 97]  # uneven shards
        lo, hi = bounds[rank], bounds[rank + 1]
        res = evaluate(img, txt[lo:hi], lab, group=dist.group.WORLD, chunk_rows=16, chunk_cols=8)
        ex = [[int(j)] for j in lab]
        g_lo, g_hi = [0, 13, 31][rank], [0, 13, 31][rank + 1]
        v, i = topk(txt, img[g_lo:g_hi], 9, exclude=ex, group=dist.group.WORLD, chunk_gallery=5)
        torch.save(
            {"res": dict(res), "first": res.ranks["image_to_text"].first, "v": v, "i": i},
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


def test_sharded_equals_unsharded_gloo(tmp_path):
    run_ranks(_sharded_worker, 2, str(tmp_path))
    img, txt, lab = _data(n_img=31, n_txt=97, d=6, seed=11)
    img, txt = img.round(), txt.round()
    want = evaluate(img, txt, lab)
    wv, wi = topk(txt, img, 9, exclude=[[int(j)] for j in lab])
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt", weights_only=False)
        assert got["res"] == dict(want)
        np.testing.assert_array_equal(got["first"], want.ranks["image_to_text"].first)
        assert torch.equal(got["i"], wi) and torch.equal(got["v"], wv)


def test_progress_bar(capsys):
    img, txt, lab = _data()
    evaluate(img, txt, lab, progress=True, chunk_rows=8)
    assert "retrieval" in capsys.readouterr().err
