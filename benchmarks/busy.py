"""The busy loop of ``vlkernels bench --load``, in a module of its own: a spawned child imports only this (no torch),
so it is spinning within milliseconds of its start."""

import os


def busy_loop(cores: set[int], ready) -> None:
    os.sched_setaffinity(0, cores)
    ready.set()
    while True:
        pass
