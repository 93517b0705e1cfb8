"""vlkernels benchmark suite: one harness (harness.py), one bench_<family>.py per family.

Installed as ``vlkernels.benchmarks`` so the ``vlkernels bench`` command finds it from any install.
"""
