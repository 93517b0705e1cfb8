"""Threads per block of each CUDA kernel, read from its ``<<<grid, block, ...>>>`` launch sites in csrc/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2]  # vlkernels/
CSRC = PACKAGE.parent / "csrc"
_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.Div: int.__floordiv__,
        ast.FloorDiv: int.__floordiv__}  # fmt: skip


def arith(expr: str) -> int | None:
    """The value of an integer expression of literals, + - * / // and parentheses (C's int division), or None for
    anything else: a small parser over Python's ast, no eval."""

    def value(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(ast.dump(node))

    try:
        return value(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def _split_args(text: str) -> list[str]:
    """The top-level comma-separated arguments of a launch configuration."""
    args, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    return [*args, cur]


def threads_at_launch_sites(csrc: Path = CSRC) -> dict[str, int]:
    """Threads per block of each ``__global__`` kernel: the block argument of its launch site with csrc/'s
    ``constexpr int NAME = digits`` substituted and ``dim3(x, y, z)`` read as ``x * y * z``."""
    text = "\n".join(p.read_text() for p in sorted(csrc.rglob("*.cu")) + sorted(csrc.rglob("*.h")))
    pattern = r"constexpr\s+(?:int|int64_t)\s+(\w+)\s*=\s*(\d+)"
    consts = {m.group(1): int(m.group(2)) for m in re.finditer(pattern, text)}
    threads = {}
    for m in re.finditer(r"(\w+)(?:<[^;{}]*?>)?\s*<<<\s*(.+?)>>>", text, re.S):
        args = _split_args(m.group(2))
        if len(args) < 2:
            continue
        expr = re.sub(r"\b\w+::", "", args[1]).strip()
        expr = re.sub(r"\b([A-Za-z_]\w*)\b", lambda t: str(consts.get(t.group(1), t.group(1))), expr)
        expr = re.sub(r"dim3\(([^)]*)\)", lambda t: "*".join(f"({p})" for p in t.group(1).split(",")), expr)
        n = arith(expr)
        if n is not None:
            threads[m.group(1)] = n
    return threads
