"""Runs test code in a new child of the fork server (tests/conftest.py): a process that has imported torch but not
vlkernels, started in milliseconds instead of a fresh interpreter's seconds of torch import. For the checks that need
a process vlkernels has not touched yet: a module imported first, or an environment variable the extension reads
once when it loads."""

import multiprocessing
import os
import traceback

# Imports nothing of vlkernels: unpickling _child in the fork server's child imports this module.


def _child(conn, code: str, env: dict[str, str]) -> None:
    try:
        os.environ.clear()
        os.environ.update(env)
        exec(compile(code, "<forked>", "exec"), {"__name__": "__forked__"})
        conn.send(None)
    except BaseException:
        conn.send(traceback.format_exc())
    finally:
        conn.close()


def run_forked(code: str, env: dict[str, str] | None = None, timeout: float = 600) -> str | None:
    """Runs `code` in a new fork-server child whose environment is this process's plus `env` (as a subprocess given
    `env=dict(os.environ, **env)` would have). Returns None when the code ran to its end, else the child's traceback
    (ending in the exception's type and message) or a line saying how the child died."""
    ctx = multiprocessing.get_context("forkserver")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, code, {**os.environ, **(env or {})}), daemon=True)
    proc.start()
    send.close()
    try:
        if not recv.poll(timeout):
            proc.kill()
            return f"the child ran past {timeout} s"
        return recv.recv()
    except EOFError:
        proc.join()
        return f"the child died with exit code {proc.exitcode} before reporting"
    finally:
        recv.close()
        proc.join()
