"""Builds vlkernels._C with CMake (pybind11, no libtorch).

Environment:
  VLKERNELS_NO_CUDA=1     force a CPU-only build.
  VLKERNELS_CUDA=1        build the CUDA kernels (needs nvcc) even when no CUDA torch is importable here.
  VLKERNELS_CUDA_ARCHS    CMake CUDA architectures, default "80;90".
  VLKERNELS_SANITIZE=1    build with AddressSanitizer + UBSan (for the sanitizer test run).
  VLKERNELS_BUILD_TYPE    CMake build type, default Release.
Without either CUDA flag, CUDA is built when nvcc is found and the torch importable at build time has CUDA
(use `pip install --no-build-isolation .` so the build sees your torch).
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _load_srchash():
    spec = importlib.util.spec_from_file_location("_vlk_srchash", ROOT / "vlkernels" / "_srchash.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _want_cuda() -> bool:
    if os.environ.get("VLKERNELS_NO_CUDA", "0") == "1":
        return False
    nvcc = shutil.which("nvcc") or (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc").exists()
    if os.environ.get("VLKERNELS_CUDA", "0") == "1":
        if not nvcc:
            raise RuntimeError("VLKERNELS_CUDA=1 but nvcc was not found (put it on PATH or set CUDA_HOME)")
        return True
    if not nvcc:
        return False
    try:
        import torch

        return torch.version.cuda is not None
    except ImportError:
        return False


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: CMakeExtension) -> None:
        import pybind11

        extdir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_temp = Path(self.build_temp).resolve() / "cmake"
        build_temp.mkdir(parents=True, exist_ok=True)
        cuda = _want_cuda()
        cfg = os.environ.get("VLKERNELS_BUILD_TYPE", "Release")
        args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={extdir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCMAKE_BUILD_TYPE={cfg}",
            f"-DVLK_WITH_CUDA={'ON' if cuda else 'OFF'}",
            f"-DVLK_CUDA_ARCHS={os.environ.get('VLKERNELS_CUDA_ARCHS', '80;90')}",
            f"-DVLK_SANITIZE={'ON' if os.environ.get('VLKERNELS_SANITIZE') == '1' else 'OFF'}",
            f"-DVLK_SOURCE_HASH={_load_srchash().source_hash(ROOT)}",
        ]
        if shutil.which("ninja"):
            args.append("-GNinja")
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_temp), *args], check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", str(build_temp), "--config", cfg, "-j", jobs], check=True)


setup(
    # benchmarks/ ships inside the package as vlkernels.benchmarks so `vlkernels bench` works from any install.
    packages=[*find_packages(include=["vlkernels", "vlkernels.*"]), "vlkernels.benchmarks"],
    package_dir={"vlkernels.benchmarks": "benchmarks"},
    ext_modules=[CMakeExtension("vlkernels._C")],
    cmdclass={"build_ext": CMakeBuild},
)
