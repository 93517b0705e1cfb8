"""The fuzzing harness itself: fuzz/run.py finds every fuzz/fuzz_*.py target, each with a seed corpus. (Every target's
short run, on the sanitized build, is part of tests/test_build.py::test_cpp_kernels_under_asan_ubsan.)"""

import importlib.util
import json
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


def _crash_dir(tmp_path: Path, *names: str) -> Path:
    d = tmp_path / "crashes"
    d.mkdir()
    for n in names:
        (d / n).write_bytes(b"x")
    return d


DONE = (
    "#1912\tDONE   corp: 1/1b lim: 21 exec/s: 478 rss: 647Mb\nDone 1912 runs in 4 second(s)\nstat::peak_rss_mb: 647\n"
)


@pytest.mark.parametrize(
    "exitcode, log, saved, finding",
    [
        (0, DONE, (), False),
        # A finished run whose teardown (static destructors after libFuzzer's exit(0)) ended non-zero.
        (1, DONE, (), False),
        (-11, DONE, (), False),
        (0, DONE, ("slow-unit-abc",), False),
        (1, DONE, ("crash-abc",), True),
        (1, "==4242==ERROR: AddressSanitizer: heap-buffer-overflow\n" + DONE, (), True),
        (1, "csrc/x.cpp:3:5: runtime error: signed integer overflow\n" + DONE, (), True),
        (1, "=== Uncaught Python exception: ===\nValueError\n==77== ERROR: libFuzzer: deadly signal\n", (), True),
        # Died before the end of the run with nothing saved (killed, or a crash in startup): a finding.
        (-9, "#71\tINITED exec/s: 0 rss: 641Mb\n", (), True),
        (0, "", (), True),
        (None, DONE, (), True),
    ],
)
def test_what_counts_as_a_finding(tmp_path, exitcode, log, saved, finding):
    assert _runner()._is_finding(exitcode, log, _crash_dir(tmp_path, *saved)) is finding


def test_a_crashing_target_is_reported_with_its_input(tmp_path):
    pytest.importorskip("atheris")
    target = tmp_path / "fuzz_raises.py"
    target.write_text("def TestOneInput(data: bytes):\n    raise ValueError('planted')\n")
    # In a process of its own: the harness's fork server imports fuzz/run.py by its module name.
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import run; from pathlib import Path; "
        "print(json.dumps(run.run_target(Path(sys.argv[2]), 1, [], Path(sys.argv[3]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO / "fuzz"), str(target), str(tmp_path / "work")],
        capture_output=True,
        text=True,
        check=True,
    )
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["finding"], res["log_tail"]
    assert res["crashes"] and "planted" in res["log_tail"]
