"""VQA v2 accuracy with the official answer normalization (GT-Vision-Lab/VQA, PythonEvaluationTools/vqaEvaluation).

The word tables below are data transcribed from the official evaluation script, vqaEval.py in the GT-Vision-Lab/VQA
repository (commit c4e6a0e, the version the VQA v2 challenge and LAVIS use): the contractions table, the
number-word map, the article list and the punctuation list. The procedure around them is written from the script's
documented semantics; see README.md in this folder for the rules and their quirks.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# Source: vqaEval.py `self.contractions` (GT-Vision-Lab/VQA @ c4e6a0e). Keys that start with a capital letter can
# never match (answers are lower-cased first); they are kept because the table is the official one.
_CONTRACTION_PAIRS = """
aint:ain't arent:aren't cant:can't couldve:could've couldnt:couldn't couldn'tve:couldn't've couldnt've:couldn't've
didnt:didn't doesnt:doesn't dont:don't hadnt:hadn't hadnt've:hadn't've hadn'tve:hadn't've hasnt:hasn't
havent:haven't hed:he'd hed've:he'd've he'dve:he'd've hes:he's howd:how'd howll:how'll hows:how's Id've:I'd've
I'dve:I'd've Im:I'm Ive:I've isnt:isn't itd:it'd itd've:it'd've it'dve:it'd've itll:it'll let's:let's maam:ma'am
mightnt:mightn't mightnt've:mightn't've mightn'tve:mightn't've mightve:might've mustnt:mustn't mustve:must've
neednt:needn't notve:not've oclock:o'clock oughtnt:oughtn't ow's'at:'ow's'at 'ows'at:'ow's'at 'ow'sat:'ow's'at
shant:shan't shed've:she'd've she'dve:she'd've she's:she's shouldve:should've shouldnt:shouldn't
shouldnt've:shouldn't've shouldn'tve:shouldn't've somebody'd:somebodyd somebodyd've:somebody'd've
somebody'dve:somebody'd've somebodyll:somebody'll somebodys:somebody's someoned:someone'd someoned've:someone'd've
someone'dve:someone'd've someonell:someone'll someones:someone's somethingd:something'd
somethingd've:something'd've something'dve:something'd've somethingll:something'll thats:that's thered:there'd
thered've:there'd've there'dve:there'd've therere:there're theres:there's theyd:they'd theyd've:they'd've
they'dve:they'd've theyll:they'll theyre:they're theyve:they've twas:'twas wasnt:wasn't wed've:we'd've
we'dve:we'd've weve:we've werent:weren't whatll:what'll whatre:what're whats:what's whatve:what've whens:when's
whered:where'd wheres:where's whereve:where've whod:who'd whod've:who'd've who'dve:who'd've wholl:who'll whos:who's
whove:who've whyll:why'll whyre:why're whys:why's wont:won't wouldve:would've wouldnt:wouldn't
wouldnt've:wouldn't've wouldn'tve:wouldn't've yall:y'all yall'll:y'all'll y'allll:y'all'll yall'd've:y'all'd've
y'alld've:y'all'd've y'all'dve:y'all'd've youd:you'd youd've:you'd've you'dve:you'd've youll:you'll youre:you're
youve:you've
"""
CONTRACTIONS: dict[str, str] = dict(pair.split(":", 1) for pair in _CONTRACTION_PAIRS.split())

# Source: vqaEval.py `self.manualMap`, `self.articles`, `self.punct` (GT-Vision-Lab/VQA @ c4e6a0e). The order of
# PUNCTUATION matters: characters are processed one after another against the growing output.
NUMBER_WORDS: dict[str, str] = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
ARTICLES: frozenset[str] = frozenset({"a", "an", "the"})
PUNCTUATION: tuple[str, ...] = tuple(';/[]"{}()=+\\_-><@`,?!')

# "1,000": a comma between two digits switches every punctuation mark to deletion instead of a space.
_COMMA_BETWEEN_DIGITS = re.compile(r"(\d)(,)(\d)")
# A period not followed by a digit is deleted ("3.5" keeps its point). The official pattern also has a `(?!<=\d)`
# group that is a no-op lookahead (it can never match at a '.'), so it is left out.
_PERIOD = re.compile(r"\.(?!\d)")
# The official call passes re.UNICODE (= 32) positionally into re.sub's `count`: at most 32 periods are deleted.
_PERIOD_COUNT = int(re.UNICODE)


@functools.lru_cache(maxsize=1 << 16)
def process_punctuation(text: str) -> str:
    """The official ``processPunctuation``: punctuation deleted or spaced out, periods stripped.

    For each mark in :data:`PUNCTUATION` (in order): if the *input* has the mark next to a space, or has a comma
    between two digits anywhere, every occurrence is deleted; otherwise every occurrence becomes a space. Then
    periods not followed by a digit are deleted (at most 32, as the official call does). Case and spacing are
    otherwise untouched.
    """
    out = text
    digit_comma = _COMMA_BETWEEN_DIGITS.search(text) is not None
    for p in PUNCTUATION:
        if digit_comma or (p + " ") in text or (" " + p) in text:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return _PERIOD.sub("", out, count=_PERIOD_COUNT)


@functools.lru_cache(maxsize=1 << 16)
def process_digit_article(text: str) -> str:
    """The official ``processDigitArticle``: lower-case, split on whitespace, number words to digits, articles
    dropped, contractions restored word by word, words re-joined by single spaces."""
    words = [NUMBER_WORDS.get(w, w) for w in text.lower().split()]
    return " ".join(CONTRACTIONS.get(w, w) for w in words if w not in ARTICLES)


def normalize_answer(text: str) -> str:
    """Normalize a predicted answer exactly as the official VQA evaluation does.

    Newlines and tabs become spaces, the ends are stripped, then :func:`process_punctuation` and
    :func:`process_digit_article` (rules in ``vlkernels/metrics/README.md``).

    Args:
        text: the answer string.

    Returns:
        The normalized string (possibly empty).

    Raises:
        ValueError: ``text`` is not a str.

    Note:
        Cached (answers repeat heavily); pure Python.

    Example:
        >>> normalize_answer("Two dogs.")
        '2 dogs'
    """
    if not isinstance(text, str):
        raise ValueError(f"answer must be a str, got {type(text).__name__}")
    return process_digit_article(process_punctuation(_clean(text)))


def _clean(text: str) -> str:
    return text.replace("\n", " ").replace("\t", " ").strip()


@dataclass
class VQAResult:
    """Output of :func:`vqa_accuracy`. Accuracies are fractions in [0, 1] (the official script prints 100x these,
    rounded; :meth:`official` reproduces that layout)."""

    per_question: list[float]
    overall: float
    per_answer_type: dict[str, float] = field(default_factory=dict)
    per_question_type: dict[str, float] = field(default_factory=dict)
    question_ids: list | None = None
    """The question id of each entry of ``per_question`` (set by :func:`vqa_evaluate`)."""

    answer_type_labels: list[str] | None = None
    question_type_labels: list[str] | None = None

    def official(self, n: int = 2) -> dict:
        """The official ``VQAEval.accuracy`` dict: percentages rounded to ``n`` decimals.

        Computed with the official arithmetic, ``round(100 * sum(acc) / len(acc), n)`` with the sum taken in
        question order, so exact ties round as vqaEval.py rounds them (``100 * mean`` can differ in the last bit).
        """

        def pct(values: list[float]) -> float:
            return round(100 * float(sum(values)) / len(values), n)

        def by_type(labels: list[str] | None) -> dict[str, float]:
            groups: dict[str, list[float]] = {}
            for a, t in zip(self.per_question, labels or ()):
                groups.setdefault(t, []).append(a)
            return {t: pct(v) for t, v in groups.items()}

        return {
            "overall": pct(self.per_question) if self.per_question else float("nan"),
            "perQuestionType": by_type(self.question_type_labels),
            "perAnswerType": by_type(self.answer_type_labels),
        }


def _check_strings(values: object, name: str, n: int | None = None) -> list:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a sequence (list or tuple), got {type(values).__name__}")
    if n is not None and len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries but predictions has {n}")
    return list(values)


def _group_mean(acc: list[float], labels: list[str]) -> dict[str, float]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for a, t in zip(acc, labels):
        sums[t] = sums.get(t, 0.0) + a
        counts[t] = counts.get(t, 0) + 1
    return {t: sums[t] / counts[t] for t in sums}


def _question_accuracy(pred: str, gts: list[str]) -> float:
    pred = normalize_answer(pred)
    # Official quirk: the human answers are not stripped, only punctuation-processed (never lower-cased, never
    # digit/article processed), and only when they are not all identical.
    if len(set(gts)) > 1:
        gts = [process_punctuation(g) for g in gts]
    hits = [g == pred for g in gts]
    m = sum(hits)
    # Leave-one-out: dropping answer i leaves m - hits[i] matches, scored min(1, matches / 3). Summed in answer order
    # and divided once, as the official loop does, so the float result is the official one to the last bit.
    total = 0.0
    for h in hits:
        total += min(1.0, (m - h) / 3)
    return total / len(gts)


def vqa_accuracy(
    predictions: Sequence[str],
    answers: Sequence[Sequence[str]],
    answer_types: Sequence[str] | None = None,
    question_types: Sequence[str] | None = None,
    *,
    num_answers: int | None = 10,
) -> VQAResult:
    """VQA v2 accuracy as the official evaluation computes it (GT-Vision-Lab ``vqaEval.py``).

    .. math::
        \\mathrm{Acc}(a) = \\frac{1}{n}\\sum_{i=1}^{n} \\min\\Big(1, \\frac{|\\{j \\ne i : g_j = a\\}|}{3}\\Big)

    the mean over the ``n`` leave-one-out subsets of the human answers ``g`` (Antol et al. 2015, Goyal et al. 2017).
    With ``n = 10`` and ``k`` matching humans this is 0, 0.3, 0.6, 0.9 for k = 0..3 and 1 for k >= 4.

    Normalization, as the official script: the prediction gets newline/tab -> space, strip, punctuation handling
    (a mark next to a space, or any comma between digits, deletes the mark, otherwise it becomes a space; periods
    not followed by a digit are removed), lower-casing, number words -> digits, articles removed, the contractions
    table. The human answers are only punctuation-processed, and only when they are not all identical.

    Args:
        predictions: ``N`` predicted answer strings.
        answers: ``N`` sequences of human answer strings (``num_answers`` each).
        answer_types: optional ``N`` labels ("yes/no", "number", "other") for per-answer-type accuracy.
        question_types: optional ``N`` labels ("what color is the", ...) for per-question-type accuracy.
        num_answers: required number of human answers per question (VQA v2: 10); ``None`` accepts any count >= 1.

    Returns:
        :class:`VQAResult` with per-question accuracies, the overall mean and the per-type means (fractions; call
        ``.official()`` for the official percent dict).

    Raises:
        ValueError: a non-sequence argument, a non-string prediction or answer, length mismatches, or a question
            with the wrong number of answers.

    Note:
        Pure Python with cached normalization (answers repeat heavily), linear in the number of answers.
        Deterministic.
        The quirks are the official ones on purpose, e.g. with ten identical human answers "t-shirt" a predicted
        "t-shirt" normalizes to "t shirt" and scores 0. An empty ``predictions`` gives overall NaN.

    Example:
        >>> vqa_accuracy(["dog"], [["dog"] * 5 + ["cat"] * 5]).overall
        1.0
    """
    preds = _check_strings(predictions, "predictions")
    n = len(preds)
    gts = _check_strings(answers, "answers", n)
    for i, p in enumerate(preds):
        if not isinstance(p, str):
            raise ValueError(f"predictions[{i}] must be a str, got {type(p).__name__}")
    if num_answers is not None and num_answers < 1:
        raise ValueError(f"num_answers must be >= 1 or None, got {num_answers}")
    for i, g in enumerate(gts):
        if isinstance(g, str) or not isinstance(g, Sequence):
            raise ValueError(f"answers[{i}] must be a sequence of strings, got {type(g).__name__}")
        if (num_answers is not None and len(g) != num_answers) or len(g) == 0:
            want = num_answers if num_answers is not None else ">= 1"
            raise ValueError(f"answers[{i}] has {len(g)} answers; expected {want}")
        if not all(isinstance(a, str) for a in g):
            raise ValueError(f"answers[{i}] must contain only strings")
    types = {}
    for name, labels in (("answer_types", answer_types), ("question_types", question_types)):
        if labels is not None:
            labels = _check_strings(labels, name, n)
            if not all(isinstance(t, str) for t in labels):
                raise ValueError(f"{name} must contain only strings")
            types[name] = labels
    acc = [_question_accuracy(p, list(g)) for p, g in zip(preds, gts)]
    return VQAResult(
        per_question=acc,
        overall=sum(acc) / n if n else float("nan"),
        per_answer_type=_group_mean(acc, types["answer_types"]) if "answer_types" in types else {},
        per_question_type=_group_mean(acc, types["question_types"]) if "question_types" in types else {},
        answer_type_labels=types.get("answer_types"),
        question_type_labels=types.get("question_types"),
    )


def _load(obj: object) -> object:
    if isinstance(obj, (str, os.PathLike)):
        with open(obj) as f:
            return json.load(f)
    return obj


def vqa_evaluate(annotations: object, results: object, *, num_answers: int | None = 10) -> VQAResult:
    """VQA v2 accuracy from the official file formats (what ``VQA.loadRes`` + ``VQAEval.evaluate`` consume).

    .. math:: \\mathrm{Acc}(a) = \\tfrac{1}{10}\\sum_{i} \\min(1, |\\{j \\ne i : g_j = a\\}| / 3)

    Args:
        annotations: the annotation JSON (a path, the loaded dict with an ``"annotations"`` list, or that list):
            entries with ``question_id``, ``answers`` (a list of ``{"answer": ...}``), ``answer_type`` and
            ``question_type``.
        results: the result JSON (a path or the loaded list) of ``{"question_id": ..., "answer": ...}``.
        num_answers: as in :func:`vqa_accuracy`.

    Returns:
        :class:`VQAResult` in annotation order, with ``question_ids`` set.

    Raises:
        ValueError: malformed entries, a duplicated question id, or results whose question ids differ from the
            annotations' (the official ``loadRes`` refuses them too), plus everything :func:`vqa_accuracy` raises.

    Note:
        The whole annotation set is evaluated; subset the annotations first to evaluate part of it.

    Example:
        >>> dogs = [{"answer": "dog", "answer_id": k} for k in range(1, 11)]
        >>> ann = [{"question_id": 1, "answers": dogs, "answer_type": "other", "question_type": "what is"}]
        >>> vqa_evaluate(ann, [{"question_id": 1, "answer": "Dog."}]).overall
        1.0
    """
    anns = _load(annotations)
    if isinstance(anns, dict):
        anns = anns.get("annotations")
    if not isinstance(anns, list):
        raise ValueError("annotations must be a path, a dict with an 'annotations' list, or that list")
    res = _load(results)
    if not isinstance(res, list):
        raise ValueError("results must be a path or a list of {'question_id', 'answer'} dicts")
    pred: dict = {}
    for i, r in enumerate(res):
        if not isinstance(r, dict) or "question_id" not in r or "answer" not in r:
            raise ValueError(f"results[{i}] must be a dict with 'question_id' and 'answer'")
        if r["question_id"] in pred:
            raise ValueError(f"results has question_id {r['question_id']!r} more than once")
        pred[r["question_id"]] = r["answer"]
    qids, answers, atypes, qtypes = [], [], [], []
    for i, a in enumerate(anns):
        try:
            qids.append(a["question_id"])
            answers.append([x["answer"] for x in a["answers"]])
            atypes.append(a["answer_type"])
            qtypes.append(a["question_type"])
        except (KeyError, TypeError) as e:
            raise ValueError(
                f"annotations[{i}] is malformed ({e!r}); entries need question_id, answers (a list of "
                "{'answer': ...}), answer_type and question_type"
            ) from e
    if len(set(qids)) != len(qids):
        raise ValueError("annotations has a duplicated question_id")
    missing, extra = set(qids) - set(pred), set(pred) - set(qids)
    if missing or extra:
        raise ValueError(
            f"results do not correspond to the annotations: {len(missing)} question(s) without a result, "
            f"{len(extra)} result(s) for unknown questions"
        )
    out = vqa_accuracy([pred[q] for q in qids], answers, atypes, qtypes, num_answers=num_answers)
    out.question_ids = qids
    return out
