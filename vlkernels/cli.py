"""The `vlkernels` command: info, bench, and the families' own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from vlkernels._benchmarks import harness as _benchmarks

# Families that add a subcommand expose register(subparsers) in these modules; missing ones are skipped.
FAMILY_CLIS = ("vlkernels.retrieval.cli", "vlkernels.captioning.cli", "vlkernels.detection.cli")


def cmd_info(args: argparse.Namespace) -> int:
    import torch

    import vlkernels
    from vlkernels import _ext
    from vlkernels._triton import get_backend, triton_version
    from vlkernels.retrieval.screen import describe as retrieval_screen

    print(f"vlkernels {vlkernels.__version__}")
    print(f"torch     {torch.__version__} (CUDA build: {torch.version.cuda or 'no'})")
    print(f"triton    {triton_version() or 'not installed'}")
    gpu = torch.cuda.is_available()
    try:
        C = _ext.load()
        cpp = f"yes (families: {', '.join(C.families)}; {vlkernels.get_num_threads()} threads)"
        if not C.has_cuda:
            cuda_kernels = "not built (this is a CPU-only build of the extension)"
        else:
            cuda_kernels = "built" + ("" if gpu else "; unused here: no GPU visible")
    except _ext.ExtensionError as e:
        cpp, cuda_kernels = f"NO: {e}", "not available"
    print("backends:")
    print(f"  C++ CPU kernels   {cpp}")
    print(f"  CUDA kernels      {cuda_kernels}")
    triton_gpu = "yes" if gpu and triton_version() else "no (needs triton and a CUDA device)"
    print(f"  Triton on GPU     {triton_gpu}")
    try:
        switch = get_backend()
    except ValueError as e:  # a bad VLKERNELS_BACKEND: said here, as every op would raise it
        switch = f"invalid: {e}"
    print(f"  backend switch    {switch} (VLKERNELS_BACKEND or vlkernels.set_backend: auto, triton or torch)")
    print(f"  retrieval screen  {retrieval_screen()}")
    try:
        import faiss

        faiss_gpu = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
        print(f"  faiss             {faiss.__version__} ({'GPU' if faiss_gpu else 'CPU'})")
    except ImportError:
        print("  faiss             not installed")
    print(f"GPU: {torch.cuda.get_device_name() if gpu else 'none'}")
    return 0


def _count(minimum: int):
    """argparse type: an integer >= minimum (a usage error naming the bound otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def _outputs_writable(*checks: tuple) -> bool:
    """check_output for each (path, flag) the command creates folders for; prints the error and returns False."""
    from vlkernels._cli_io import check_output

    try:
        for path, flag in checks:
            check_output(path, flag, make_parents=True)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return False
    return True


def cmd_bench(args: argparse.Namespace) -> int:
    import torch

    if not _outputs_writable((args.json, "--json"), (args.plot, "--plot")):
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA device is visible", file=sys.stderr)
        return 2
    from vlkernels._triton import get_backend

    try:
        get_backend()  # VLKERNELS_BACKEND, read by every case: refused here, not as a traceback mid-run
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.rounds is not None and not args.load:
        print("error: --rounds sets the rounds of --load N; give --load too", file=sys.stderr)
        return 2
    harness = _benchmarks()
    rounds = 3 if args.rounds is None else args.rounds
    return harness.run(
        args.families or None, args.device, args.quick, args.json, args.plot, load=args.load, rounds=rounds
    )


def cmd_gpu_profile(args: argparse.Namespace) -> int:
    from vlkernels.dev import profile

    families = profile.FAMILIES if args.families is None else tuple(f for f in args.families.split(",") if f)
    if args.worker:  # the compile subprocess profile_triton starts (compiled mode, no TRITON_INTERPRET)
        only = None if args.only is None else [int(i) for i in args.only.split(",") if i]
        return profile.worker(families, args.jobs or 1, only, args.keys)
    if args.docs is not None:  # the generated tables (profile rows, roofline model) of a markdown file
        from vlkernels import roofline

        if not args.docs.is_file():
            print(f"error: --docs {args.docs}: no such file", file=sys.stderr)
            return 2

        args.docs.write_text(roofline.render_docs(args.docs.read_text()))
        return 0
    if not _outputs_writable((args.json, "--json")):
        return 2
    return profile.run(args.json, families, cuda=not args.no_cuda, jobs=args.jobs, reuse=args.reuse)


def cmd_selftest(args: argparse.Namespace) -> int:
    from vlkernels import selftest

    if not _outputs_writable((args.json, "--json")):
        return 2
    return selftest.main(args.device or ("cuda" if _cuda_visible() else "cpu"), args.quick, args.json)


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def _register_gpu(sub) -> None:
    """`gpu-profile` (static SASS profile, no GPU needed) and `selftest` (checks and GPU timings on this machine)."""
    prof = sub.add_parser("gpu-profile", help="compile every kernel offline for sm_80/sm_90 and report its SASS")
    prof.add_argument("--json", type=Path, default=None, help="write the rows as JSON lines to this file")
    prof.add_argument("--no-cuda", action="store_true", help="skip the nvcc compiles of csrc/**/*.cu")
    prof.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: the usable CPUs)")
    prof.add_argument("--reuse", type=Path, default=None, help="keep this profile's rows whose cache key is current")
    prof.add_argument("--families", default=None, help="comma-separated Triton families (default: all)")
    prof.add_argument("--docs", type=Path, default=None, help="rewrite the generated tables of this markdown file")
    prof.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    prof.add_argument("--keys", action="store_true", help=argparse.SUPPRESS)
    prof.add_argument("--only", default=None, help=argparse.SUPPRESS)
    prof.set_defaults(func=cmd_gpu_profile)
    st = sub.add_parser("selftest", help="check every GPU-path op against its reference (and time it on a GPU)")
    st.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when visible, else cpu")
    st.add_argument("--quick", action="store_true", help="small shapes only, no benchmark cases")
    st.add_argument("--json", type=Path, default=None, help="write the results and the environment as JSON")
    st.set_defaults(func=cmd_selftest)


def build_parser() -> argparse.ArgumentParser:
    import vlkernels

    p = argparse.ArgumentParser(prog="vlkernels", description=__doc__)
    p.add_argument("--version", action="version", version=f"vlkernels {vlkernels.__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="versions, available backends and the GPU")
    info.set_defaults(func=cmd_info)
    bench = sub.add_parser("bench", help="run the benchmark suite (all families, or the ones named)")
    bench.add_argument("families", nargs="*", help="families to run (default: all)")
    bench.add_argument("--quick", action="store_true", help="small shapes, for a smoke run")
    bench.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    bench.add_argument("--json", type=Path, default=None, help="append results as JSON lines to this file")
    bench.add_argument("--plot", type=Path, default=None, help="write a bar chart of the medians (.png, .svg or .pdf)")
    bench.add_argument(
        "--load", type=_count(0), default=0, metavar="N", help="also time every provider beside N busy processes"
    )
    bench.add_argument(
        "--rounds", type=_count(1), default=None, help="alternating quiet/loaded rounds with --load (default 3)"
    )
    bench.set_defaults(func=cmd_bench)
    _register_gpu(sub)
    for mod_name in FAMILY_CLIS:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            # Only a family that is not there is skipped; a broken import inside one still raises.
            if e.name is None or not mod_name.startswith(e.name):
                raise
            continue
        mod.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
