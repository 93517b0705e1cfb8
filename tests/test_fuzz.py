"""The fuzzing harness itself: fuzz/run.py finds every fuzz/fuzz_*.py target, each with a seed corpus. (Every target's
short run, on the sanitized build, is part of tests/test_build.py::test_cpp_kernels_under_asan_ubsan.)"""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TARGETS = sorted((REPO / "fuzz").glob("fuzz_*.py"))


def _runner():
    spec = importlib.util.spec_from_file_location("fuzz_run", REPO / "fuzz" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_runner_discovers_every_target():
    assert {p.name for p in _runner().targets()} == {p.name for p in TARGETS}
    assert any(p.name == "fuzz_core.py" for p in TARGETS)
    for p in TARGETS:
        assert "def TestOneInput(data: bytes)" in p.read_text(), f"{p.name} has no TestOneInput(data: bytes)"
    with pytest.raises(SystemExit, match="no fuzz target"):
        _runner().targets(["no_such_target"])


def test_every_target_has_a_seed_corpus():
    """The sanitized CI run has no coverage signal of its own: it mutates from these (fuzz/README.md)."""
    for p in TARGETS:
        seeds = REPO / "fuzz" / "seeds" / p.stem.removeprefix("fuzz_")
        assert seeds.is_dir() and any(seeds.iterdir()), f"{p.name} has no seed corpus in {seeds}"
