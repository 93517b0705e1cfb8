"""Readers of what the compilers say: ptxas -v logs, cuobjdump SASS and resource usage, PTX floating-point ops."""

from __future__ import annotations

import re


def tensor_core_class(sass: str) -> str:
    """``HGMMA`` (sm_90 warpgroup MMA), ``HMMA`` (mma.sync), or ``none``."""
    if re.search(r"\bHGMMA\.", sass):
        return "HGMMA"
    if re.search(r"\bHMMA\.", sass):
        return "HMMA"
    return "none"


def parse_ptxas_v(log: str) -> dict[str, dict[str, int]]:
    """Per entry function (mangled name): registers, spill stores/loads, stack frame and static smem from -v."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line) or re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = out.setdefault(m.group(1), {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0})
            current.setdefault("smem_static", 0)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current["smem_static"] = int(s.group(1)) if s else 0
    return out


def sass_by_function(sass: str) -> dict[str, str]:
    parts = re.split(r"\n\s*Function : (\S+)\n", "\n" + sass)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def res_usage(text: str) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage``: per function REG, STACK, SHARED, LOCAL."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        if name and "REG:" in line:
            out[name] = {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}
            name = None
    return out


# Floating-point PTX instructions: fma, and mul/add/sub without a rounding modifier (ptxas may fuse those; ``.rn``
# forbids it). ``div.rn``/``sqrt.rn`` are correctly rounded whatever SASS ptxas expands them into (its FFMA steps).
_PTX_FMA = re.compile(r"^\s*(?:@!?%\w+\s+)?fma\.\w+(?:\.\w+)*\.f(?:16|32|64)\b", re.M)
_PTX_CONTRACTIBLE = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:mul|add|sub)(?:\.(?!rn\b|rz\b|rm\b|rp\b)\w+)*\.f(?:32|64)\b",
                               re.M)  # fmt: skip


def ptx_fp_counts(ptx: str) -> dict[str, dict[str, int]]:
    """Per ``.entry`` (mangled name): its PTX fma instructions and its contractible mul/add/sub."""
    out = {}
    parts = re.split(r"^\s*(?:\.visible\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)\s*\(", ptx, flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = {"ptx_fma": len(_PTX_FMA.findall(body)), "ptx_contractible": len(_PTX_CONTRACTIBLE.findall(body))}
    return out
