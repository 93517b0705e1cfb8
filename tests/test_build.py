"""Build checks: every .cu compiles with nvcc (CI has nvcc but no GPU), and the C++-backed tests pass under
AddressSanitizer + UBSan (plus a short fuzzing run of every fuzz/fuzz_*.py target on the sanitized build, seeded
by fuzz/seeds/)."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pybind11
import pytest

from vlkernels.dev import profile as gp

REPO = Path(__file__).resolve().parent.parent
CU_FILES = sorted((REPO / "csrc").rglob("*.cu"))
# Test files whose code paths run C++ kernels; each family adds its own here.
SANITIZED_TESTS = [
    "tests/test_core.py",
    "tests/test_metrics_choice.py",
    "tests/test_captioning_tokenizer.py",
    "tests/test_captioning_tokenizer_java.py",
    "tests/test_boxes_iou.py",
    "tests/test_boxes_rle.py",
    "tests/test_boxes_rle_counts.py",
    "tests/test_boxes_mask_api.py",
    "tests/test_boxes_coco_mask.py",
    "tests/test_boxes_grounding.py",
    "tests/test_captioning.py",
    "tests/test_captioning_api.py",
    "tests/test_captioning_safety.py",
    "tests/test_captioning_cli.py",
    "tests/test_captioning_files.py",
    "tests/test_retrieval.py",
    "tests/test_retrieval_edges.py",
    "tests/test_retrieval_exact.py",
    "tests/test_parallel.py",
    "tests/test_interrupt.py",
    "tests/test_detection.py",
    "tests/test_detection_lvis.py",
    "tests/test_detection_inputs.py",
]
# Left out of the sanitized run to keep CI under 10 minutes on 2 cores: tests that only start
# subprocesses of the CLI (its C++ paths are covered in-process by the same files), GPU/Triton/compile tests (no C++),
# and the RLIMIT_NPROC drop (the spawn-failure path runs in-process through the test hook).
# Timing tests are left out too (scaling ratios, Ctrl-C latency in a fresh subprocess): ASan's instrumentation and
# shadow memory distort time. So are the live Java comparisons: the Java process is most of their time, and the C++
# tokenizer runs on the same kind of strings in the committed 3,085-pair Java corpus test.
# The torch twin of retrieval is torch's matmuls and sorts; its one C++ call, exact_pairs, runs in every CPU-path
# test of the same file (and is bit-checked there on every adversarial kind).
SANITIZE_DESELECT = (
    "not triton and not compile and not registration and not subprocess and not rlimit and not linear"
    " and not sigint and not java_live and not java_nltk and not pycocoevalcap_java and not torch_path"
)
# -Og with line tables: about 60 % of -O1's compile time (the sanitized build is a large share of CI), the tests run
# as fast as at -O1 (-O0 is slower: the kernels' loops), and ASan sees at least the accesses -O1 keeps.
SANITIZE_FLAGS = "-Og -g1 -DNDEBUG"
FUZZ_SECONDS = 3


@pytest.mark.parametrize("cu", CU_FILES, ids=[str(p.relative_to(REPO)) for p in CU_FILES])
def test_cuda_source_compiles(cu):
    """nvcc compiles the file for sm_80 and sm_90 (the static GPU profile's compile), and every kernel in it gives
    its committed profile row wherever that row was made from these sources and this nvcc. Where the committed rows
    are current (their key is this nvcc's and these sources'), they are that compile's output already: one file a
    run compiles, picked by the key (so the pick changes as the sources do), as the Triton specs are re-checked."""
    nvcc = gp.nvcc_path()
    if nvcc is None or gp.nvidia_tools() is None:
        pytest.skip("nvcc and Triton's cuobjdump are needed to compile-check the CUDA sources")
    key = gp.cuda_key(nvcc)
    mine = [c for c in gp.read_rows(gp.COMMITTED) if c["source"] == "cuda" and c["file"] == str(cu.relative_to(REPO))]
    if mine and all(c.get("key") == key and c.get("status") == "ok" for c in mine):
        pick = CU_FILES[int(key, 16) % len(CU_FILES)]
        if cu != pick:
            pytest.skip(f"committed rows current; this run compiles {pick.relative_to(REPO)}")
    rows = gp.profile_cuda(files=[cu])
    assert {r["arch"] for r in rows} == {80, 90}
    for r in rows:
        assert r["status"] == "ok", f"nvcc failed on {cu.name} for sm_{r['arch']}:\n{r['status'][-4000:]}"
    committed = {gp.identity(c): c for c in gp.read_rows(gp.COMMITTED) if c["source"] == "cuda"}
    for r in rows:
        c = committed.get(gp.identity(r))
        if c is not None and c.get("key") == r["key"]:
            assert gp.measured(r) == gp.measured(c), gp.identity(r)


def _gcc_lib(name: str) -> str | None:
    out = subprocess.run(["g++", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


def _sanitizer_runtime() -> str | None:
    """libasan, then libstdc++: preloading libasan alone leaves its __cxa_throw interceptor unresolved (the Python
    binary has no libstdc++), so the first C++ exception would abort instead of reaching pybind11."""
    asan, cxx = _gcc_lib("libasan.so"), _gcc_lib("libstdc++.so.6") or _gcc_lib("libstdc++.so")
    if asan is None:
        return None
    return f"{asan} {cxx}" if cxx else asan


@pytest.mark.slow
@pytest.mark.early
def test_cpp_kernels_under_asan_ubsan(tmp_path):
    asan = _sanitizer_runtime()
    if asan is None or shutil.which("cmake") is None:
        pytest.skip("g++ with libasan and cmake are needed for the sanitizer build")
    sys.path.insert(0, str(REPO))
    from vlkernels._srchash import source_hash

    build = tmp_path / "build"
    cfg = [
        "cmake",
        "-S",
        str(REPO),
        "-B",
        str(build),
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        f"-DCMAKE_CXX_FLAGS_RELWITHDEBINFO={SANITIZE_FLAGS}",
        "-DVLK_WITH_CUDA=OFF",
        "-DVLK_SANITIZE=ON",
        f"-DVLK_SOURCE_HASH={source_hash(REPO)}",
        f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={build}",
    ]
    if shutil.which("ninja"):
        cfg.append("-GNinja")
    subprocess.run(cfg, check=True, capture_output=True)
    r = subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    so = next(build.glob("_C*.so"))
    env = dict(
        os.environ,
        VLKERNELS_C_PATH=str(so),
        LD_PRELOAD=asan,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
    )
    tests = [t for t in SANITIZED_TESTS if (REPO / t).exists()]
    # Two workers when xdist is there: the other CI worker is busy with the rest of the suite at first, idle later.
    xdist = ["-n", "2"] if importlib.util.find_spec("xdist") else []
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            *xdist,
            "-m",
            "not slow",
            "-k",
            SANITIZE_DESELECT,
            *tests,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, f"sanitized test run failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
    if importlib.util.find_spec("atheris") is None:
        return
    # The CI short fuzzing run, on the sanitized build: each fuzz/fuzz_*.py target replays its committed seed corpus
    # (fuzz/seeds/<target>/, grown by coverage-guided runs of the regular build: with libasan preloaded atheris has
    # no coverage signal) and then mutates it for a few seconds.
    fuzz = [
        sys.executable,
        "fuzz/run.py",
        "--seconds",
        str(FUZZ_SECONDS),
        "--jobs",
        "2",
        "--workdir",
        str(tmp_path / "fuzz"),
    ]
    r = subprocess.run(fuzz, cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"fuzzing found something:\n{r.stdout[-8000:]}\n{r.stderr[-3000:]}"
    # Every target ran (the runner's summary: one "<target> ok <n> executions" line each), past its seeds (the
    # slowest target, detection_json, makes ~150 executions under ASan in its 3 s).
    summary = [line for line in r.stdout.splitlines() if " executions in " in line]
    ran = {line.split()[0] for line in summary}
    assert ran == {p.stem.removeprefix("fuzz_") for p in (REPO / "fuzz").glob("fuzz_*.py")}, r.stdout
    assert all(int(line.split(" executions")[0].split()[-1]) > 10 for line in summary), r.stdout
