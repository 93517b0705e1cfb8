"""Output helpers shared by the family subcommands of the `vlkernels` command line."""

from __future__ import annotations

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
