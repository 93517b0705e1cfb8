"""VQA v2 accuracy: the seed's worked example, leave-one-out values computed by hand, the official normalization
rules (GT-Vision-Lab vqaEval.py) case by case, and a naive leave-one-out reference on random data."""

import json
import random

import pytest

from vlkernels.metrics import normalize_answer, vqa_accuracy, vqa_evaluate
from vlkernels.metrics.reference import vqa_accuracy_ref
from vlkernels.metrics.vqa import CONTRACTIONS, process_punctuation


def test_vqa_seed_example_five_of_ten_dog():
    # Seed 000: 5 of 10 annotators say "dog", the model says "dog": min(5/3, 1) = 1.0.
    res = vqa_accuracy(["dog"], [["dog"] * 5 + ["cat"] * 5])
    assert res.overall == 1.0 and res.per_question == [1.0]


# By hand, 10 answers of which k match: the k subsets that leave out a matching answer see k - 1 matches, the other
# 10 - k see k. k=1: (1*0 + 9*(1/3))/10 = 0.3. k=2: (2*(1/3) + 8*(2/3))/10 = 0.6. k=3: (3*(2/3) + 7*1)/10 = 0.9.
# k=4: (4*1 + 6*1)/10 = 1.
@pytest.mark.parametrize("k,want", [(0, 0.0), (1, 0.3), (2, 0.6), (3, 0.9), (4, 1.0), (7, 1.0), (10, 1.0)])
def test_vqa_leave_one_out_by_hand(k, want):
    others = ["cat", "bird", "fish", "cow", "pig", "hen", "owl", "ant", "bee", "elk"]
    answers = ["dog"] * k + others[: 10 - k]
    assert vqa_accuracy(["dog"], [answers]).overall == pytest.approx(want, abs=1e-15)


def test_vqa_any_answer_count_when_allowed():
    # 3 answers, 2 match: subsets drop a match (1 match -> 1/3) twice, drop the other once (2 -> 2/3): 4/9.
    res = vqa_accuracy(["dog"], [["dog", "dog", "cat"]], num_answers=None)
    assert res.overall == pytest.approx(4 / 9)


@pytest.mark.parametrize(
    "raw,want",
    [
        # Number words become digits, articles go, case is folded (processDigitArticle).
        ("Two", "2"),
        ("none", "0"),
        ("Ten dogs", "10 dogs"),
        ("The Dog", "dog"),
        ("a an the cat", "cat"),
        # Contractions table, word by word; the apostrophe itself is not punctuation.
        ("dont", "don't"),
        ("isnt it", "isn't it"),
        ("whats", "what's"),
        ("what's", "what's"),
        ("Im", "im"),  # the table's "Im" key is capitalised and can never match lower-cased text
        # A mark next to a space is deleted; elsewhere it becomes a space (then "a" is an article).
        ("hello, world", "hello world"),
        ("red,white", "red white"),
        ("t-shirt", "t shirt"),
        ("black/white", "black white"),
        ("a/b", "b"),
        ("(left)", "left"),
        ("yes!", "yes"),
        ("10:30", "10:30"),  # ':' is not in the official list
        # A comma between digits anywhere deletes every mark instead of spacing it.
        ("1,000", "1000"),
        ("1,000 t-shirts", "1000 tshirts"),
        # Periods: removed unless followed by a digit.
        ("end.", "end"),
        ("3.5", "3.5"),
        ("e.g.", "eg"),
        ("1.", "1"),
        # Whitespace: newline/tab to space, strip, and split/join collapses runs.
        ("  big \t dog\n", "big dog"),
    ],
)
def test_vqa_normalization_official_rules(raw, want):
    assert normalize_answer(raw) == want


def test_vqa_period_strip_count_quirk():
    # The official call passes re.UNICODE (32) as re.sub's count: only the first 32 periods are removed.
    assert process_punctuation("." * 40) == "." * 8
    assert normalize_answer("." * 40) == "." * 8


def test_vqa_contractions_table_is_the_official_one():
    assert len(CONTRACTIONS) == 120
    assert CONTRACTIONS["somebody'd"] == "somebodyd"  # official entry, reversed direction and all
    assert CONTRACTIONS["yall'd've"] == "y'all'd've"


def test_vqa_ground_truth_quirks():
    # Ten identical human answers are not punctuation-processed, the prediction is: "t-shirt" -> "t shirt" != 0.
    assert vqa_accuracy(["t-shirt"], [["t-shirt"] * 10]).overall == 0.0
    # With two distinct answers all ten are processed: 9 x "t shirt" match the normalized prediction.
    assert vqa_accuracy(["t-shirt"], [["t-shirt"] * 9 + ["shirt"]]).overall == 1.0
    # Human answers are never lower-cased or digit-mapped.
    assert vqa_accuracy(["Dog"], [["Dog"] * 10]).overall == 0.0
    assert vqa_accuracy(["two"], [["2"] * 4 + ["two"] * 6]).overall == 1.0
    assert vqa_accuracy(["two"], [["two"] * 10]).overall == 0.0


def test_vqa_matches_leave_one_out_reference_random():
    rng = random.Random(0)
    vocab = ["yes", "no", "2", "two", "Two", "t-shirt", "t shirt", "red,white", "1,000", "1000", "the dog", "dog",
             "dog.", "dont", "don't", "3.5", "none", "0", "black/white", "black white", " yes "]  # fmt: skip
    preds, answers = [], []
    for _ in range(3000):
        pool = rng.sample(vocab, rng.randint(1, 4))
        answers.append([rng.choice(pool) for _ in range(10)])
        preds.append(rng.choice(vocab))
    res = vqa_accuracy(preds, answers)
    want = vqa_accuracy_ref(preds, answers)
    assert res.per_question == pytest.approx(want, abs=1e-15)
    assert res.overall == pytest.approx(sum(want) / len(want))
    assert 0.05 < res.overall < 0.95  # the random data exercises both matches and misses


def test_vqa_per_type_aggregation_and_official_dict():
    preds = ["yes", "2", "red", "no"]
    answers = [["yes"] * 10, ["2"] * 2 + ["3"] * 8, ["blue"] * 10, ["no"] * 3 + ["yes"] * 7]
    res = vqa_accuracy(preds, answers, answer_types=["yes/no", "number", "other", "yes/no"],
                       question_types=["is the", "how many", "what color", "is the"])  # fmt: skip
    assert res.per_question == pytest.approx([1.0, 0.6, 0.0, 0.9])
    assert res.per_answer_type == pytest.approx({"yes/no": 0.95, "number": 0.6, "other": 0.0})
    assert res.per_question_type == pytest.approx({"is the": 0.95, "how many": 0.6, "what color": 0.0})
    assert res.overall == pytest.approx(2.5 / 4)
    assert res.official() == {
        "overall": 62.5,
        "perQuestionType": {"is the": 95.0, "how many": 60.0, "what color": 0.0},
        "perAnswerType": {"yes/no": 95.0, "number": 60.0, "other": 0.0},
    }


def test_normalize_answer_rejects_non_string():
    with pytest.raises(ValueError, match="answer must be a str"):
        normalize_answer(3)


def test_vqa_empty():
    res = vqa_accuracy([], [])
    assert res.per_question == [] and res.overall != res.overall


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        (("dog", [["dog"] * 10]), {}, "predictions must be a sequence"),
        (([None], [["dog"] * 10]), {}, r"predictions\[0\] must be a str"),
        (([3], [["dog"] * 10]), {}, r"predictions\[0\] must be a str"),
        ((["dog"], [["dog"] * 9]), {}, "has 9 answers; expected 10"),
        ((["dog"], [[]]), {"num_answers": None}, "has 0 answers"),
        ((["dog", "cat"], [["dog"] * 10]), {}, "answers has 1 entries but predictions has 2"),
        ((["dog"], ["dog" * 10]), {}, r"answers\[0\] must be a sequence"),
        ((["dog"], [["dog"] * 9 + [1]]), {}, "only strings"),
        ((["dog"], [["dog"] * 10]), {"answer_types": ["a", "b"]}, "answer_types has 2 entries"),
        ((["dog"], [["dog"] * 10]), {"question_types": [1]}, "question_types must contain only strings"),
        ((["dog"], [["dog"] * 10]), {"num_answers": 0}, "num_answers must be >= 1"),
    ],
)
def test_vqa_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        vqa_accuracy(*args, **kwargs)


def _ann(qid, answers, atype="other", qtype="what is"):
    return {"question_id": qid, "answers": [{"answer": a, "answer_id": i + 1} for i, a in enumerate(answers)],
            "answer_type": atype, "question_type": qtype, "image_id": 0}  # fmt: skip


def test_vqa_evaluate_official_file_formats(tmp_path):
    anns = {"annotations": [_ann(7, ["2"] * 2 + ["3"] * 8, "number", "how many"), _ann(3, ["yes"] * 10, "yes/no")]}
    results = [{"question_id": 3, "answer": "Yes"}, {"question_id": 7, "answer": "two"}]
    res = vqa_evaluate(anns, results)
    assert res.question_ids == [7, 3] and res.per_question == pytest.approx([0.6, 1.0])
    assert res.per_answer_type == pytest.approx({"number": 0.6, "yes/no": 1.0})
    (tmp_path / "ann.json").write_text(json.dumps(anns))
    (tmp_path / "res.json").write_text(json.dumps(results))
    from_files = vqa_evaluate(tmp_path / "ann.json", str(tmp_path / "res.json"))
    assert (
        from_files.official()
        == res.official()
        == {
            "overall": 80.0,
            "perQuestionType": {"how many": 60.0, "what is": 100.0},
            "perAnswerType": {"number": 60.0, "yes/no": 100.0},
        }
    )


@pytest.mark.parametrize(
    "anns,results,match",
    [
        ([_ann(1, ["a"] * 10)], [], "1 question"),
        ([_ann(1, ["a"] * 10)], [{"question_id": 1, "answer": "a"}, {"question_id": 2, "answer": "a"}], "1 result"),
        ([_ann(1, ["a"] * 10)], [{"question_id": 1, "answer": "a"}] * 2, "more than once"),
        ([_ann(1, ["a"] * 10)], [{"question_id": 1}], r"results\[0\] must be a dict"),
        ([_ann(1, ["a"] * 10)], {"question_id": 1}, "results must be a path or a list"),
        ([{"question_id": 1, "answers": [{"answer": "a"}] * 10}], [{"question_id": 1, "answer": "a"}], "malformed"),
        ({"questions": []}, [], "annotations must be"),
        ([_ann(1, ["a"] * 10)] * 2, [{"question_id": 1, "answer": "a"}], "duplicated question_id"),
        ([_ann(1, ["a"] * 10)], [{"question_id": 1, "answer": None}], r"predictions\[0\] must be a str"),
    ],
)
def test_vqa_evaluate_errors(anns, results, match):
    with pytest.raises(ValueError, match=match):
        vqa_evaluate(anns, results)


def _official_arithmetic(pred: str, questions: list[list[str]]) -> float:
    """vqaEval.py's accuracy loop, transcribed from its semantics: answers are dicts with distinct ids, each is left
    out once (``item != gtAnsDatum``), ``min(1, float(len(matching)) / 3)`` summed in order, ``float(sum) / len``
    per question, and ``round(100 * float(sum(accQA)) / len(accQA), 2)`` overall."""
    acc_qa = []
    for answers in questions:
        gts = [{"answer": a, "answer_id": i + 1} for i, a in enumerate(answers)]
        gt_acc = []
        for datum in gts:
            others = [item for item in gts if item != datum]
            matching = [item for item in others if item["answer"] == pred]
            gt_acc.append(min(1, float(len(matching)) / 3))
        acc_qa.append(float(sum(gt_acc)) / len(gt_acc))
    return round(100 * float(sum(acc_qa)) / len(acc_qa), 2)


def test_vqa_official_rounding_at_exact_ties():
    # The reported case: 100 * mean lands just below x.xx5 where the official 100 * sum / n lands on it.
    q1 = ["cat"] * 8 + ["dog"] * 2
    q2 = "cat,cat,cat,dog,cat,cat,cat,cat,dog,dog".split(",")
    questions = [q1, q2] + [["cat"] * 10] * 14
    res = vqa_accuracy(["dog"] * 16, questions)
    assert _official_arithmetic("dog", questions) == 9.37
    assert res.official()["overall"] == 9.37


def test_vqa_official_matches_official_arithmetic_on_random_sets():
    import random

    rng = random.Random(7)
    for _ in range(300):
        nq = rng.randint(1, 40)
        questions = [[rng.choice(["dog", "cat"]) for _ in range(10)] for _ in range(nq)]
        types = [rng.choice(["a", "b"]) for _ in range(nq)]
        res = vqa_accuracy(["dog"] * nq, questions, answer_types=types)
        assert res.official()["overall"] == _official_arithmetic("dog", questions)
        for t in set(types):
            sub = [q for q, tt in zip(questions, types) if tt == t]
            assert res.official()["perAnswerType"][t] == _official_arithmetic("dog", sub)
