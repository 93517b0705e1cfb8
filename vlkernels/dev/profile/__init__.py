"""The static GPU profile: every kernel compiled offline for sm_80 and sm_90, and what its SASS says.

No GPU is needed (none has ever run these kernels here). Triton kernels are compiled at exactly the ``KernelSpec``
rows each family's ``configs.kernel_specs()`` lists (the configs its launchers can pick on CUDA) with Triton's
offline compiler and its bundled ``ptxas``/``cuobjdump`` (triton_compile.py); every ``csrc/**/*.cu`` kernel with
``nvcc -Xptxas -v`` to a cubin (cuda_compile.py). Per kernel and config a row records registers/thread, spill bytes,
shared memory, the tensor-core instruction class in the SASS (``HGMMA`` = Hopper warpgroup MMA, ``HMMA`` =
``mma.sync``, ``none``; sass.py), the theoretical occupancy (occupancy.py) and, for CUDA kernels, the fma and
contractible mul/add in their PTX. keys.py names rows and their cache keys; report.py reuses current committed rows,
gates and prints them.

``vlkernels gpu-profile [--json PATH]`` prints the table and the violations (exit status 1 when there are any):
a GEMM-bearing kernel without tensor-core instructions (on sm_90 without ``HGMMA``), spills, shared memory above
the arch's opt-in limit, a compile error, a ``@triton.jit`` kernel no family's ``kernel_specs()`` covers, or an
FMA contraction in a CUDA kernel that must equal its CPU twin bit for bit.
"""

from vlkernels.dev.profile.cuda_compile import FMA_ALLOWED, NVCC_FLAGS, compile_cuda, nvcc_path, nvcc_version
from vlkernels.dev.profile.keys import COMMITTED, MEASURED, cuda_key, identity, measured, read_rows
from vlkernels.dev.profile.launch_sites import threads_at_launch_sites
from vlkernels.dev.profile.occupancy import ARCH_LIMITS, ArchLimits, occupancy
from vlkernels.dev.profile.report import profile, profile_cuda, run, table, violations
from vlkernels.dev.profile.sass import parse_ptxas_v, ptx_fp_counts, res_usage, sass_by_function, tensor_core_class
from vlkernels.dev.profile.triton_compile import (
    FAMILIES,
    OfflineCompileUnavailable,
    collect_specs,
    compile_triton,
    jit_kernels,
    kernel_arg_names,
    nvidia_tools,
    profile_triton,
    triton_cache_key,
    worker,
)

__all__ = [
    "ARCH_LIMITS", "COMMITTED", "FAMILIES", "FMA_ALLOWED", "MEASURED", "NVCC_FLAGS", "ArchLimits",
    "OfflineCompileUnavailable", "collect_specs", "compile_cuda", "compile_triton", "cuda_key", "identity",
    "jit_kernels", "kernel_arg_names", "measured", "nvcc_path", "nvcc_version", "nvidia_tools", "occupancy",
    "parse_ptxas_v", "profile", "profile_cuda", "profile_triton", "ptx_fp_counts", "read_rows", "res_usage", "run",
    "sass_by_function", "table", "tensor_core_class", "threads_at_launch_sites", "triton_cache_key", "violations",
    "worker",
]  # fmt: skip
