"""Runs a test's worker as the ranks of a gloo process group on this machine (the distributed tests' one launcher)."""

import socket

import fast_interpreter
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, worker, *args) -> None:
    fast_interpreter.install()
    worker(rank, *args)


def run_ranks(worker, world: int, *args) -> None:
    """Calls worker(rank, world, port, *args) in `world` processes and waits for them; a rank's exception fails
    the test. forkserver: the ranks inherit no threads or CUDA state from the pytest process."""
    mp.start_processes(_rank, args=(worker, world, free_port(), *args), nprocs=world, start_method="forkserver")
