"""Fuzz target: the C++ captions-file reader against json.load and the Python reader (a differential harness).

Each input seeds a generator of reference/results JSON documents in the three layouts (records, COCO annotation
object, {image_id: [captions]}) with ids at the integer edges (2**31, 2**53, 2**63, beyond), then applies up to
three mutations (duplicate keys, a UTF-8 byte order mark, UTF-16/32, deep nesting, huge numbers, truncation, a
flipped byte) or takes the raw input bytes as one of the files. Both readers must accept with equal scores or both
refuse with a ValueError (fuzz/captions_json_cases.py); anything else is a finding.

    python fuzz/run.py --seconds 600 captions_json
"""

import contextlib
import os
import random
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The generator's branches are the coverage signal (no signal with gcc's libasan preloaded: fuzz/README.md).
with atheris.instrument_imports() if "libasan" not in os.environ.get("LD_PRELOAD", "") else contextlib.nullcontext():
    from captions_json_cases import Differential, generate, mutate

_DIFF = Differential()


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    rng = random.Random(fdp.ConsumeInt(8))
    refs, preds = generate(rng)
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        if fdp.ConsumeBool():
            refs = mutate(rng, refs)
        else:
            preds = mutate(rng, preds)
    if fdp.ConsumeIntInRange(0, 7) == 0:
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        if fdp.ConsumeBool():
            refs = raw
        else:
            preds = raw
    _DIFF.check(refs, preds, tokenize=fdp.ConsumeIntInRange(0, 3) == 0)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
