"""The fuzzing harness itself: fuzz/run.py finds every fuzz/fuzz_*.py target and runs it briefly without a finding.
(The sanitized short run is part of tests/test_build.py::test_cpp_kernels_under_asan_ubsan.)"""

import importlib.util
import subprocess
import sys
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


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_short_fuzz_run_of_core(tmp_path):
    r = subprocess.run(
        [sys.executable, "fuzz/run.py", "core", "--seconds", "3", "--workdir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    execs = int(r.stdout.split(" executions")[0].split()[-1])
    assert execs > 100, r.stdout
