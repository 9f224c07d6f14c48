"""Plots and per-event tables of one continuum run (several workloads on one fleet),
read from the run's store only: ``python -m bench.continuum --store runs --run ID --out
docs/results/continuum``.

Writes ``timeline.png`` (every workload's key figures and the run's events on one time
axis) and prints a markdown table per event window: what FL, the functions and the
semantic offload saw before, during and after it. Times are seconds after the fleet was
ready. Every figure says how it was obtained: FL accuracy, round durations and upload
round trips are measured; a function's end-to-end latency is measured network time
(through the emulated link) plus the node's device time, stretched from a measured CPU
time or modelled (emulated GPU) as its ``timing`` tag says; an offload inference's
latency and task accuracy are measured (its device times stretched), an mmWave link's
rate is modelled (Sionna channel windows, ``radio_rate_mbps``; its clock starts when the
links' schedules do, at the fleet's ready time).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from testbed.rows import WorkloadMetricRow
from testbed.store import RunStore

MARKED = {
    "node_down": ("crash/outage", "#cf222e"),
    "node_restarted": ("restart", "#1a7f37"),
    "link_degraded": ("degrade", "#bc4c00"),
    "link_restored": ("restored", "#8250df"),
}


def rows_by(rows: list[WorkloadMetricRow], t0: float, workload: str, name: str) -> list[Any]:
    return [r for r in rows if r.workload == workload and r.name == name and r.value is not None]


def passes(run_dir: Path, node: str) -> list[tuple[float, float]]:
    """(start, end) wall s after the fleet was ready of ``node``'s passes, as the run's
    orbital model recorded them (``space.json``; the link played them as its schedule)."""
    path = run_dir / "space.json"
    if not path.is_file():
        return []
    rec = json.loads(path.read_text())
    return [(p["wall_start_s"], p["wall_end_s"]) for p in rec.get("passes", {}).get(node, [])]


def rules(
    ax: Any, events: list[dict[str, Any]], sat: list[tuple[float, float]], label: bool
) -> None:
    """Vertical lines for the marked events; the space silo's passes shaded."""
    for e in events:
        if e["kind"] in MARKED:
            name, colour = MARKED[e["kind"]]
            ax.axvline(e["t_s"], color=colour, ls="--", lw=1)
            if label:
                ax.text(e["t_s"], 1.01, f"{name} {e['node']}", color=colour, fontsize=7,
                        rotation=30, transform=ax.get_xaxis_transform())  # fmt: skip
    for a, b in sat:
        ax.axvspan(a, b, color="#0969da", alpha=0.08)
        if label:
            ax.text(a, 0.02, "sat pass (link open)", color="#0969da", fontsize=7,
                    transform=ax.get_xaxis_transform())  # fmt: skip


def plot(
    store: RunStore, run_id: str, tl: dict[str, Any], out: Path, sat: list[tuple[float, float]]
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, t0 = store.workload_metrics(run_id), tl["t0"]
    events = tl["events"]
    fig, axes = plt.subplots(5, 1, figsize=(11, 13), sharex=True)
    ends = {e["round"]: e["t_s"] for e in events if e["kind"] == "round_end"}
    acc = [
        (ends[r.round], r.value) for r in rows_by(rows, t0, "fl", "global_acc") if r.round in ends
    ]
    ax = axes[0]
    if acc:
        ax.plot(*zip(*sorted(acc), strict=True), "o-", color="#0969da", label="global accuracy")
    dur = [(ends[r.round], r.value) for r in rows_by(rows, t0, "fl", "round_duration_s")
           if r.round in ends]  # fmt: skip
    ax2 = ax.twinx()
    if dur:
        ax2.bar([t for t, _ in dur], [v for _, v in dur], width=1.0, color="#8c959f", alpha=0.5)
    ax.set_ylabel("FL global accuracy\n(measured)")
    ax2.set_ylabel("round duration s\n(bars, measured)")
    ax = axes[1]
    for node in sorted({str(r.node) for r in rows_by(rows, t0, "fl", "round_trip_s")}):
        pts = [(r.ts - t0, r.value) for r in rows_by(rows, t0, "fl", "round_trip_s")
               if r.node == node]  # fmt: skip
        ax.plot(*zip(*pts, strict=True), "o-", ms=3, label=node)
    ax.set_ylabel("FL client round trip s\n(train + upload, measured)")
    ax.legend(fontsize=7, ncol=4)
    ax = axes[2]
    e2e = rows_by(rows, t0, "functions", "e2e_ms")
    for k, fn in enumerate(sorted({str(r.node) for r in e2e})):
        colour = f"C{k}"
        for timing, marker in (("stretched", "o"), ("modelled", "^"), ("measured", "s")):
            pts = [
                (r.ts - t0, r.value) for r in e2e if r.node == fn and r.tags.get("timing") == timing
            ]
            if pts:
                ax.scatter(*zip(*pts, strict=True), s=8, marker=marker, color=colour,
                           label=f"{fn} ({timing} device time)")  # fmt: skip
        errs = [r.ts - t0 for r in rows_by(rows, t0, "functions", "request_error") if r.node == fn]
        if errs:
            ax.scatter(errs, [1.0] * len(errs), marker="x", color=colour, s=14,
                       label=f"{fn} failed request")  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("function end-to-end ms\n(network measured + device)")
    ax.legend(fontsize=6, ncol=3, loc="upper left")
    ax = axes[3]
    gpu = rows_by(rows, t0, "functions", "on_gpu")
    for k, fn in enumerate(sorted({str(r.node) for r in gpu})):
        pts = sorted((r.ts - t0, r.value) for r in gpu if r.node == fn)
        pts.append((max(e["t_s"] for e in events), pts[-1][1]))  # held to the end
        ax.step([p[0] for p in pts], [p[1] + 0.04 * k for p in pts], where="post", label=fn)
    ax.set_ylabel("function on GPU\n(1 = GPU backend)")
    ax.legend(fontsize=7)
    offload_panel(axes[4], rows, t0)
    end = max(e["t_s"] for e in events)
    for i, a in enumerate(axes):
        rules(a, events, sat, label=i == 0)
    axes[-1].set_xlim(right=end)
    fig.suptitle(f"{run_id}: FL, functions and semantic offload on one fleet", y=0.995)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "timeline.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    from PIL import Image  # (matplotlib's own dependency) a small palette PNG

    Image.open(path).convert("RGB").quantize(64).save(path, optimize=True)
    return path


def radio_rates(rows: list[WorkloadMetricRow]) -> dict[str, list[tuple[float, float]]]:
    """Each mmWave link's modelled rate windows: node -> [(t_s, Mbit/s)]."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.name == "radio_rate_mbps" and r.value is not None:
            out.setdefault(str(r.node), []).append((float(r.tags["t_s"]), r.value))
    return {k: sorted(v) for k, v in out.items()}


def offload_panel(ax: Any, rows: list[WorkloadMetricRow], t0: float) -> None:
    """Each offload device's inference latency (measured) and its mmWave link's rate
    (modelled, right axis)."""
    e2e = rows_by(rows, t0, "semantic_offload", "offload_e2e_ms")
    for k, dev in enumerate(sorted({str(r.node) for r in e2e})):
        pts = [(r.ts - t0, r.value) for r in e2e if r.node == dev]
        ax.scatter(*zip(*pts, strict=True), s=5, color=f"C{k}",
                   label=f"{dev} inference e2e (measured)")  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("offload e2e ms\n(encode + link + decode)")
    ax.set_xlabel("seconds after the fleet was ready")
    ax2 = ax.twinx()
    for k, (node, pts) in enumerate(sorted(radio_rates(rows).items())):
        ax2.plot(*zip(*pts, strict=True), color=f"C{k}", lw=1, alpha=0.6,
                 label=f"{node} mmWave rate (modelled)")  # fmt: skip
    ax2.set_ylabel("mmWave rate Mbit/s\n(lines, modelled)")
    ax.legend(fontsize=6, loc="upper left")
    ax2.legend(fontsize=6, loc="upper right")


def offload_table(
    store: RunStore, run_id: str, tl: dict[str, Any], windows: dict[str, tuple[float, float]]
) -> str:
    """Markdown: per window and offload device, inferences answered, median end-to-end
    ms, mean share of tasks right (measured) and the mean modelled mmWave rate."""
    rows, t0 = store.workload_metrics(run_id), tl["t0"]
    e2e = rows_by(rows, t0, "semantic_offload", "offload_e2e_ms")
    acc = rows_by(rows, t0, "semantic_offload", "offload_task_acc")
    rates = radio_rates(rows)
    devs = sorted({str(r.node) for r in e2e})
    lines = ["| window (s) | " + " | ".join(
        f"{d}: answers / p50 e2e ms / task acc / rate Mbit/s" for d in devs) + " |",
        "|" + "---|" * (1 + len(devs))]  # fmt: skip
    for name, (a, b) in windows.items():
        cells = []
        for d in devs:
            lat = [r.value for r in e2e if r.node == d and a <= r.ts - t0 < b]
            right = [r.value for r in acc if r.node == d and a <= r.ts - t0 < b]
            rate = [v for t, v in rates.get(d, []) if a <= t < b]
            cells.append(
                f"{len(lat)} / {np.median(lat):.1f} / {np.mean(right):.3f} / {np.mean(rate):.1f}"
                if lat else f"0 / - / - / {np.mean(rate):.1f}" if rate else "0 / - / - / -"
            )
        lines.append(f"| {name} [{a:.0f}, {b:.0f}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def window_table(
    store: RunStore, run_id: str, tl: dict[str, Any], windows: dict[str, tuple[float, float]]
) -> str:
    """Markdown: per window, FL rounds ended and their mean duration, each node's round
    statuses, and per function requests, failures and median end-to-end ms."""
    rows, t0 = store.workload_metrics(run_id), tl["t0"]
    ends = {e["round"]: e["t_s"] for e in tl["events"] if e["kind"] == "round_end"}
    status: dict[int, dict[str, str]] = {}
    for s in store.round_status(run_id):
        status.setdefault(s.round, {})[s.node] = s.status
    fns = sorted({str(r.node) for r in rows if r.workload == "functions" and r.name == "e2e_ms"})
    head = (
        "| window (s) | FL rounds ended | mean round s | not completed | "
        + " | ".join(f"{f}: ok / failed / p50 ms" for f in fns)
        + " |"
    )
    lines = [head, "|" + "---|" * (4 + len(fns))]
    for name, (a, b) in windows.items():
        rs = [r for r, t in ends.items() if r is not None and a <= t < b]
        durs = [r.value for r in rows_by(rows, t0, "fl", "round_duration_s") if r.round in rs]
        missed = sorted(
            {f"{n} r{r}" for r in rs for n, st in status.get(r, {}).items() if st != "completed"}
        )
        cells = []
        for f in fns:
            ok = [r.value for r in rows if r.workload == "functions" and r.node == f
                  and r.name == "e2e_ms" and a <= r.ts - t0 < b]  # fmt: skip
            bad = [r for r in rows if r.workload == "functions" and r.node == f
                   and r.name == "request_error" and a <= r.ts - t0 < b]  # fmt: skip
            p50 = f"{np.median(ok):.1f}" if ok else "-"
            cells.append(f"{len(ok)} / {len(bad)} / {p50}")
        mean = f"{np.mean(durs):.1f}" if durs else "-"
        head = f"| {name} [{a:.0f}, {b:.0f}) | {len(rs)} | {mean} | {', '.join(missed) or '-'}"
        lines.append(head + " | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=Path("runs"))
    ap.add_argument("--run", required=True, help="run id (or a unique prefix)")
    ap.add_argument("--out", type=Path, default=Path("docs/results/continuum"))
    ap.add_argument("--sat", default="sat", help="the space silo whose passes are shaded")
    ap.add_argument("--window", action="append", default=[],
                    help="NAME:START:END seconds after fleet ready (repeatable)")  # fmt: skip
    args = ap.parse_args()
    store = RunStore(args.store)
    run = store.run(args.run)
    from testbed.controller.service import Controller

    tl = Controller(args.store, Path("experiments")).timeline(run.run_id)
    sat = passes(store.artifact_dir(run.run_id), args.sat)
    print(f"wrote {plot(store, run.run_id, tl, args.out, sat)}")
    windows = {}
    for w in args.window:
        name, a, b = w.split(":")
        windows[name] = (float(a), float(b))
    if windows:
        print(window_table(store, run.run_id, tl, windows))
        print(offload_table(store, run.run_id, tl, windows))
    for e in tl["events"]:
        if e["kind"] not in ("round_end",):
            print(f"{e['t_s']:7.1f}  {e['kind']:<16} {e['node'] or '':<8} "
                  f"{e['workload'] or 'fleet':<10} {e['detail']}")  # fmt: skip


if __name__ == "__main__":
    main()
