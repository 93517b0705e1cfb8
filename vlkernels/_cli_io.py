"""Helpers shared by the family subcommands of the `vlkernels` command line: their parser and their JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def write_json(path: Path, obj) -> int:
    """Write obj as indented JSON to path; returns the subcommand's exit status (2, with a message, if it fails)."""
    try:
        path.write_text(json.dumps(obj, indent=2) + "\n")
    except OSError as e:
        print(f"error: cannot write {path}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def add_family_parser(subparsers, name: str, summary: str, doc: str | None) -> argparse.ArgumentParser:
    """The subcommand ``name``: ``summary`` in the command list, ``doc`` (the module docstring, with its formats and
    examples laid out by hand) as its --help text, kept as written."""
    return subparsers.add_parser(
        name, help=summary, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
