"""A live fault from command-line options, and the kinds listed for ``--help``.

Every parameter of a kind is an option of ``testbed inject`` without being declared
there: ``--bandwidth-mbps 1``, ``--duration-s=8`` or ``--param bandwidth_mbps=1`` (the
same key as in YAML); the kind's own model validates the values.
"""

from __future__ import annotations

from typing import Any

from testbed.faults.base import FAULT_KINDS


def _key(opt: str) -> str:
    return opt.removeprefix("--").replace("-", "_")


def parse_params(extra: list[str], params: list[str]) -> dict[str, str]:
    """``["--a-b", "1", "--c=2"]`` and ``["d=3"]`` -> ``{"a_b": "1", "c": "2", "d": "3"}``.

    Raises
    ------
    ValueError
        For an argument that is not an option, an option without a value, or a
        ``--param`` without ``=``.
    """
    out: dict[str, str] = {}
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--"):
            raise ValueError(f"unexpected argument {arg!r} (parameters are --name value)")
        if "=" in arg:
            key, value = arg.split("=", 1)
            i += 1
        elif i + 1 < len(extra):
            key, value = arg, extra[i + 1]
            i += 2
        else:
            raise ValueError(f"option {arg} needs a value")
        out[_key(key)] = value
    for p in params:
        key, sep, value = p.partition("=")
        if not sep:
            raise ValueError(f"--param {p!r}: expected key=value")
        out[_key(key.strip())] = value.strip()
    return out


def live_fault(
    kind: str, node: str | None, tier: str | None, values: dict[str, Any]
) -> dict[str, Any]:
    """The raw spec of a fault injected now (``at_time_s: 0``), None values dropped."""
    spec = {"kind": kind, "node": node, "tier": tier, **values}
    spec.update(at_time_s=0.0, phase="during")
    return {k: v for k, v in spec.items() if v is not None}


def kinds_help() -> str:
    """One line per registered kind: name, target, label and its parameters."""
    lines = []
    for name in sorted(FAULT_KINDS):
        cls = FAULT_KINDS[name]
        fields = cls.Params.model_fields
        opts = " ".join(
            f"--{k.replace('_', '-')}" + ("" if f.is_required() else "?") for k, f in fields.items()
        )
        lines.append(f"{name} ({cls.target}): {cls.label}" + (f"; {opts}" if opts else ""))
    return "\n".join(lines)
