"""Build checks: every .cu compiles with nvcc (CI has nvcc but no GPU), and the C++-backed tests pass under
AddressSanitizer + UBSan."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pybind11
import pytest

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
    "tests/test_boxes_grounding.py",
    "tests/test_captioning.py",
    "tests/test_captioning_api.py",
    "tests/test_retrieval.py",
]


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (str(p) for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"] if p.exists()), None
    )


@pytest.mark.parametrize("cu", CU_FILES, ids=[str(p.relative_to(REPO)) for p in CU_FILES])
def test_cuda_source_compiles(cu, tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: CUDA sources cannot be compile-checked on this machine")
    cmd = [
        nvcc,
        "-std=c++17",
        "-O2",
        "-DVLK_WITH_CUDA=1",
        f"-I{REPO / 'csrc'}",
        "-c",
        str(cu),
        "-o",
        str(tmp_path / "out.o"),
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=sm_90",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"nvcc failed on {cu.name}:\n{r.stderr[-4000:]}"


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
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            "-k",
            "not triton and not compile and not registration",
            *tests,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, f"sanitized test run failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
