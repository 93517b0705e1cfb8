"""Ctrl-C at several points of the long caption calls: ptb_tokenize of 3,000,000 captions, Cider.compute_score,
CiderD.score and the captions-file path. Each call runs a few seconds; SIGINT is sent at several offsets into a loop
of such calls (so it lands in every phase: reading the Python objects, the parallel work, building the results), and
KeyboardInterrupt must reach Python within the bound each time, the next call giving the right answer."""

import sys

import numpy as np
import pytest

from vlkernels.testing import check_interrupts

# The README promises ~0.1 s; 0.5 s leaves room for a loaded 2-core CI machine (other interrupt tests use the same).
BOUND = 0.5
# Offsets into the loop of calls: early (reading the input), then points spread over one call. Each round after the
# first is itself a call made after an interrupted one.
WAITS = (0.15, 0.6, 1.3)

# 3,000,000 captions built from 1,000 distinct strs (the list holds repeats: quick to build, same work to tokenize).
_PTB_SETUP = """
from vlkernels.captioning import ptb_tokenize
words = "a man rides horse on the beach dog runs grass two cats sleep sofa red car parked street".split()
base = [" ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 9)) + "." for i in range(1000)]
caps = base * 3000
ptb_tokenize(base)
"""

_CIDER_SETUP = """
import numpy as np
from vlkernels.captioning import Cider, CiderD
rng = np.random.default_rng(0)
vocab = np.array(["w%d" % i for i in range(20_000)])
pool = [" ".join(vocab[rng.integers(0, len(vocab), 10)]) for _ in range(20_000)]
m = 200_000
gts = {i: [pool[(7 * i + k) % 20_000] for k in range(5)] for i in range(m)}
res = {i: [pool[(11 * i + 3) % 20_000]] for i in range(m)}
small_g = {1: ["a dog runs", "a dog running"], 2: ["a cat sleeps"]}
small_r = {1: ["a dog runs"], 2: ["a cat"]}
want = Cider().compute_score(small_g, small_r)[0]
groups = [gts[i] for i in range(m)]
cands = [res[i][0] for i in range(m)]
scorer = CiderD(groups[:50_000])
"""

# (setup, calls that share it, check after each interruption)
CASES = {
    "ptb_tokenize": (_PTB_SETUP, ["for _ in range(50): ptb_tokenize(caps)"], "ptb_tokenize(['A dog.']) == ['a dog']"),
    "cider": (
        _CIDER_SETUP,
        ["for _ in range(50): Cider().compute_score(gts, res)", "for _ in range(50): scorer.score(cands, groups)"],
        "Cider().compute_score(small_g, small_r)[0] == want",
    ),
}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="SIGINT delivery timing is measured on Linux")
@pytest.mark.parametrize("case", list(CASES))
def test_ctrl_c_at_several_points_of_a_long_caption_call(case):
    setup, calls, after = CASES[case]
    check_interrupts(setup, after, [(call, wait) for call in calls for wait in WAITS], bound=BOUND, timeout=300)


def _write_files(tmp_path, n_img: int, refs: int = 5) -> tuple:
    # Random lowercase words of 3-9 letters, 8-13 a caption, drawn in bulk (a per-word draw took over a minute).
    rng = np.random.default_rng(1)
    n_caps = n_img * (refs + 1)
    n_words = rng.integers(8, 14, n_caps)
    lengths = rng.integers(3, 10, int(n_words.sum()))
    letters = rng.integers(ord("a"), ord("z") + 1, int(lengths.sum()), dtype=np.uint8).tobytes().decode()
    word_ends = np.cumsum(lengths)
    words = [letters[e - n : e] for e, n in zip(word_ends.tolist(), lengths.tolist())]
    cap_ends = np.cumsum(n_words).tolist()
    captions = [" ".join(words[e - n : e]) for e, n in zip(cap_ends, n_words.tolist())]
    ref_path, pred_path = tmp_path / "refs.json", tmp_path / "preds.json"
    with open(ref_path, "w") as f:
        f.write('{"annotations": [')
        f.write(",".join(f'{{"image_id": {k // refs}, "caption": "{captions[k]}"}}' for k in range(n_img * refs)))
        f.write("]}")
    with open(pred_path, "w") as f:
        f.write(
            "["
            + ",".join(f'{{"image_id": {i}, "caption": "{captions[n_img * refs + i]}"}}' for i in range(n_img))
            + "]"
        )
    return ref_path, pred_path


@pytest.fixture(scope="module")
def caption_files(tmp_path_factory):
    return _write_files(tmp_path_factory.mktemp("ctrl_c"), 40_000)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="SIGINT delivery timing is measured on Linux")
def test_ctrl_c_at_several_points_of_the_captions_file_path(caption_files):
    refs, preds = caption_files
    tiny = '[{"image_id": 1, "caption": "a dog"}]'
    warm = f"evaluate_captions(json.loads({tiny!r}), json.loads({tiny!r}))"
    setup = f"import json\nfrom vlkernels.captioning import evaluate_captions\n{warm}"
    call = f"for _ in range(50): evaluate_captions({str(refs)!r}, {str(preds)!r}, tokenize=True)"
    check_interrupts(setup, f"{warm}['CIDEr'] >= 0", [(call, wait) for wait in WAITS], bound=BOUND, timeout=300)
