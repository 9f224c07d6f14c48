"""Stand-alone entry point: ``python -m nodes.compression EXPERIMENT.yaml [--out DIR]``.

Thin: reads ``workload.compress`` (and ``seed``) from the YAML, validates it into
:class:`~nodes.compression.config.CompressSpec` and calls
:func:`~nodes.compression.experiment.run_compress`. ``testbed run`` / ``testbed compress``
are the product's entry points; this one exists for working on the node package alone.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary as JSON; 2 on a user error."""
    ap = argparse.ArgumentParser(prog="python -m nodes.compression")
    ap.add_argument("experiment", type=pathlib.Path, help="YAML with workload.compress")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/tt-edge"))
    ap.add_argument("--quick", action="store_true", help="override quick: true")
    args = ap.parse_args(argv)

    import yaml
    from pydantic import ValidationError

    from nodes.compression.config import CompressSpec

    try:
        doc = yaml.safe_load(args.experiment.read_text()) or {}
        raw = dict((doc.get("workload") or {}).get("compress") or {})
        if args.quick:
            raw["quick"] = True
        spec = CompressSpec(**raw)
    except (OSError, yaml.YAMLError, ValidationError) as err:
        print(f"error in {args.experiment} (workload.compress): {err}", file=sys.stderr)
        return 2
    from nodes.compression.experiment import run_compress

    summary = run_compress(
        spec, int(doc.get("seed", 0)), args.out,
        progress=lambda d, f: print(f"[{f:4.0%}] {d}", file=sys.stderr, flush=True),
    )
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
