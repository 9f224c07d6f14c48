"""Report of a functions sweep (e.g. experiments/gaia.yaml): one run per policy.

Writes ``report.md`` + ``report.html`` with the per-policy table (p50/p95 end-to-end
latency, SLO violations, GPU-seconds, switches, where each function ran), the latency
reduction of every accelerable function against ``static-cpu``, and two plots: latency
over time coloured by backend (the mode timeline) and p95 per function and policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.report_pages import write_pages
from testbed.store import RunStore

ORDER = ("static-cpu", "static-gpu", "gaia", "link-aware", "gaia-link")


def load(store: RunStore, sweep_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(policy, run_id, summary)`` of the sweep's completed functions runs, by policy."""
    runs = []
    for r in store.runs(sweep_id):
        s = r.summary_dict
        if r.status == "completed" and isinstance(s.get("functions"), dict):
            runs.append((s["policy"], r.run_id, s))
    return sorted(runs, key=lambda x: ORDER.index(x[0]) if x[0] in ORDER else len(ORDER))


def _f(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def table(runs: list[tuple[str, str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    head = ["policy", "function", "node", "mode", "backend", "requests", "p50 ms", "p95 ms"]
    head += ["SLO ms", "SLO miss %", "GPU-s", "switches", "device time"]
    rows = []
    for policy, _rid, s in runs:
        for name, f in s["functions"].items():
            rows.append(
                [
                    policy,
                    name,
                    f"{f['node']} ({f['tier']})",
                    f["mode"],
                    f"{f['start_backend']} -> {f['end_backend']}",
                    str(f["requests"]),
                    _f(f["p50_ms"]),
                    _f(f["p95_ms"]),
                    _f(f["slo_ms"], 0),
                    _f(f["slo_violation_pct"]),
                    _f(f["gpu_seconds"]),
                    str(f["switches"]),
                    "; ".join(f.get("timing", [])),
                ]
            )
    return head, rows


def reductions(runs: list[tuple[str, str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """p50 / p95 reduction vs static-cpu for accelerable functions (mode not ``cpu``)."""
    base = next((s for p, _r, s in runs if p == "static-cpu"), None)
    head = ["policy", "function", "p50 reduction %", "p95 reduction %"]
    rows: list[list[str]] = []
    if base is None:
        return head, rows
    for policy, _rid, s in runs:
        if policy == "static-cpu":
            continue
        for name, f in s["functions"].items():
            b = base["functions"].get(name)
            if b is None or f["mode"] == "cpu" or not b["p95_ms"] or not f["p95_ms"]:
                continue
            rows.append(
                [
                    policy,
                    name,
                    _f(100 * (1 - f["p50_ms"] / b["p50_ms"])),
                    _f(100 * (1 - f["p95_ms"] / b["p95_ms"])),
                ]
            )
    return head, rows


def decisions(
    store: RunStore, runs: list[tuple[str, str, dict[str, Any]]]
) -> tuple[list[str], list[list[str]]]:
    """Every mode decision of the runtime, in time order per policy (blocked ones too)."""
    head = ["policy", "t s", "function", "mode", "applied", "p95 ms", "rate rps", "reason"]
    rows: list[list[str]] = []
    for policy, rid, _s in runs:
        found = store._db.execute(
            "SELECT node, value, tags FROM metrics WHERE run_id=? AND name='mode_decision'",
            (rid,),
        ).fetchall()
        for fn, value, tags in sorted(found, key=lambda r: json.loads(r[2])["t_s"]):
            t = json.loads(tags)
            rows.append(
                [
                    policy,
                    _f(t["t_s"]),
                    fn,
                    f"{t['old']} -> {t['new']}",
                    "yes" if value == 1.0 else "no",
                    _f(t.get("p95_ms")),
                    _f(t.get("rate_rps"), 2),
                    t["reason"],
                ]  # fmt: skip
            )
    return head, rows


def plots(store: RunStore, runs: list[tuple[str, str, dict[str, Any]]], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.4 * len(runs)), sharex=True)
    axes = [axes] if len(runs) == 1 else list(axes)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (policy, rid, s) in zip(axes, runs, strict=True):
        rows = store._db.execute(
            "SELECT node, value, tags FROM metrics WHERE run_id=? AND name='e2e_ms'", (rid,)
        ).fetchall()
        for k, name in enumerate(s["functions"]):
            pts = [(json.loads(t), v) for n, v, t in rows if n == name]
            for backend, marker in (("cpu", "."), ("gpu", "^")):
                sel = [(t["t_s"], v) for t, v in pts if t["backend"].startswith(backend)]
                if sel:
                    ax.scatter(
                        *zip(*sel, strict=True),
                        s=6,
                        marker=marker,
                        color=colors[k % len(colors)],
                        label=f"{name} ({backend})",
                    )
        ax.set_yscale("log")
        ax.set_ylabel("e2e ms")
        ax.set_title(f"{policy}: latency over time (dot: CPU backend, triangle: GPU)", fontsize=9)
        ax.legend(fontsize=6, ncol=4, loc="upper right")
    axes[-1].set_xlabel("time since load start, s")
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=110)
    plt.close(fig)
    files.append("timeline.png")

    names = list(runs[0][2]["functions"])
    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / len(runs)
    for k, (policy, _rid, s) in enumerate(runs):
        vals = [s["functions"][n]["p95_ms"] or 0 for n in names]
        ax.bar([i + k * width for i in range(len(names))], vals, width, label=policy)
    ax.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(names))], names)
    ax.set_yscale("log")
    ax.set_ylabel("p95 e2e latency, ms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "p95.png", dpi=110)
    plt.close(fig)
    files.append("p95.png")
    return files


def write_functions_report(store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
    """Write the functions report of ``sweep_id`` into ``out``."""
    runs = load(store, sweep_id)
    if not runs:
        raise ValueError(f"sweep {sweep_id!r}: no completed functions runs in {store.path}")
    out.mkdir(parents=True, exist_ok=True)
    head, rows = table(runs)
    rhead, rrows = reductions(runs)
    dhead, drows = decisions(store, runs)
    pngs = plots(store, runs, out)
    timing = sorted({s.get("gpu_timing") or "no GPU used" for _p, _r, s in runs})
    idle = [
        f"{p}: {name} {f['gpu_seconds']:.1f} GPU-s"
        for p, _r, s in runs
        for name, f in s["functions"].items()
        if f["mode"] == "cpu"
    ]
    note = (
        f"Latency: end to end, measured through the emulated links; server part = device "
        f"time. GPU backends: {', '.join(timing)}. Functions with mode `cpu` (GPU-seconds): "
        + "; ".join(idle)
    )
    sections = [
        (None, head, rows),
        ("Latency reduction vs static-cpu (accelerable functions)", rhead, rrows),
        ("Mode changes over time (the dynamic runtime's decisions)", dhead, drows),
    ]
    return write_pages(out, f"Functions report: {sweep_id}", note, sections, pngs)
