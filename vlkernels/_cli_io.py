"""Helpers shared by the family subcommands of the `vlkernels` command line: their parser and their JSON output."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path


def write_json(path: Path, obj) -> int:
    """Write obj as indented JSON to path (its folders made), NaN and infinities as null (strict JSON has no token
    for them); returns the subcommand's exit status (2, with a message, if it fails)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_strict(obj), indent=2, allow_nan=False) + "\n")
    except OSError as e:
        print(f"error: cannot write {path}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def _strict(obj):
    """obj with every non-finite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def check_output(path: Path | None, flag: str = "--json", make_parents: bool = False) -> None:
    """Refuse an unwritable output file before hours of computing, not after (ValueError naming the flag).
    ``make_parents``: the command creates missing folders, so only an existing folder on the way must be writable."""
    if path is None:
        return
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file path")
    parent = path.parent if str(path.parent) else Path(".")
    if make_parents:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag} {path}: not writable")


def add_family_parser(subparsers, name: str, summary: str, doc: str | None) -> argparse.ArgumentParser:
    """The subcommand ``name``: ``summary`` in the command list, ``doc`` (the module docstring, with its formats and
    examples laid out by hand) as its --help text, kept as written."""
    return subparsers.add_parser(
        name, help=summary, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
