"""Semantic offload on the fleet (``workload.semantic_offload``): edge devices run the K
task encoders as real processes, send the merged semantic representation as real bytes
across their (mmWave) links, the fog node runs the channel (Sionna), the demultiplexer
and the task heads and answers. The orthogonal and bit-level baselines run the same way,
on the same samples, links and channel realisations.

Steps:

1. **Train** every scheme once in the run's process (:func:`nodes.semantic.model.train_offload`)
   and evaluate it there (``in_process_accuracy``, the reference of the fleet's answers).
2. **Deploy**: the fog's server (:mod:`nodes.semantic.fog`) and one link per device to it
   (its own kind: ``kind: mmwave`` links take their rate from a Sionna channel), then the
   device processes (:mod:`nodes.semantic.device`), each encoding its share of samples
   with every scheme in turn; device and fog compute is stretched to their profiles.
3. **Record** per scheme and task: ``accuracy`` (measured, on the fleet), latency
   (``e2e_s``: encoder + link + decoder, and its parts), bytes on the link, the modelled
   airtime of one inference (whole OFDM symbols / slots) and, for mmwave links, the
   modelled radio windows (``record_link_counters``); per inference, as it was
   answered (its own time stamp): ``offload_e2e_ms`` and ``offload_task_acc`` (the
   share of its K tasks answered right), the Timeline page's key metrics. Faults
   (``at_time_s``) fire from when the devices start.

Beside other workloads (:mod:`testbed.workloads.together`) the fog's server runs beside
the node's other processes (same CPUs), the devices' links join the fleet's links and
their schedules its clock, and the run's one fault schedule applies.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from nodes.semantic.config import SemanticOffloadSpec
from testbed.backends.base import Backend
from testbed.chaos import ChaosEngine
from testbed.procs import free_port, wait_port
from testbed.spec.models import LinkSpec
from testbed.workloads import register_workload
from testbed.workloads.base import LibraryWorkload, RunContext, record_link_counters

__all__ = ["SemanticOffload", "run_offload"]

DEFAULT_SNR_DB = 10.0  # the fog's channel SNR when no device link is mmwave


@register_workload("semantic_offload")
class SemanticOffload(LibraryWorkload):
    """``workload.semantic_offload``: encoders on devices, channel and heads on the fog."""

    spec_model = SemanticOffloadSpec
    key_metrics = ("offload_e2e_ms", "offload_task_acc")  # (the Timeline page draws these)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        if ctx.observer:
            ctx.observer.started(ctx.run_id, ctx.plan)
        return run_offload(ctx)


def _section(ctx: RunContext) -> SemanticOffloadSpec:
    spec = getattr(ctx.experiment.workload, "semantic_offload", None)
    if not isinstance(spec, SemanticOffloadSpec):
        raise ValueError("workload.semantic_offload: missing")
    return spec


def device_links(ctx: RunContext, spec: SemanticOffloadSpec) -> dict[str, LinkSpec]:
    """Each device's link to the fog (a ``links.nodes`` override, else the tier pair)."""
    exp = ctx.experiment
    assert exp.fleet is not None
    by_name = {name: n for n in exp.fleet.nodes for name in n.names()}
    fog_tier = by_name[spec.fog].tier
    return {d: exp.links.for_node(d, by_name[d], fog_tier) for d in spec.devices}


def channel_snr_db(spec: SemanticOffloadSpec, links: dict[str, LinkSpec]) -> tuple[float, str]:
    """The fog channel's SNR [dB] and where it comes from."""
    from radio.link_model import snr_from_distance_db

    if spec.snr_db is not None:
        return spec.snr_db, "workload.semantic_offload.snr_db"
    for name, link in links.items():
        radio = link.mmwave
        if radio is not None:
            if radio.snr_db is not None:
                return radio.snr_db, f"{name}'s mmwave link snr_db"
            assert radio.distance_m is not None
            snr = snr_from_distance_db(radio, radio.distance_m)
            return snr, f"{name}'s mmwave link at {radio.distance_m} m ({radio.path_loss})"
    return DEFAULT_SNR_DB, "default (no mmwave device link)"


def snr_steps(spec: SemanticOffloadSpec, links: dict[str, LinkSpec]) -> dict[str, list[Any]]:
    """Per device, ``[[at_s, snr_db], ...]``: its mmwave link's modelled SNR over its
    schedule, the channel SNR the fog applies to its requests (none when
    ``workload.semantic_offload.snr_db`` is set, or for a device without mmwave)."""
    from radio.link_model import RadioLinkModel

    out: dict[str, list[Any]] = {}
    for d, link in links.items():
        if spec.snr_db is None and link.mmwave is not None:
            model = RadioLinkModel(link.mmwave)
            times = sorted({0.0, *(seg.at_s for seg in link.mmwave.schedule)})
            out[d] = [[t, round(model.state_at(t).snr_db, 3)] for t in times]
    return out


def _clock(ctx: RunContext, backend: Backend) -> float:
    """Start the links' schedules (once per fleet); the epoch time of their origin."""
    if ctx.fleet is not None:
        ctx.fleet.start_schedules()
        assert ctx.fleet.schedules_t0 is not None  # (set by start_schedules)
        t0 = ctx.fleet.schedules_t0
    else:
        t0 = time.monotonic()
        backend.start_schedules(t0=t0)
    return time.time() - (time.monotonic() - t0)


def _speed(ctx: RunContext, name: str) -> float:
    return next(n.profile.cpu_speed_factor for n in ctx.plan.nodes if n.name == name)


def _deploy(ctx: RunContext, backend: Backend, spec: SemanticOffloadSpec, folder: Path,
            links: dict[str, LinkSpec], share: int) -> tuple[dict[str, Path], list[str]]:
    """Fog server, device links, device processes; device name -> its results file,
    and the devices' process keys."""
    port = free_port()
    fog_cmd = [sys.executable, "-m", "nodes.semantic.fog", "--dir", str(folder),
               "--port", str(port), "--speed-factor", str(_speed(ctx, spec.fog))]
    fog_key = backend.start_processes({spec.fog: fog_cmd})[spec.fog]
    fog_host = backend.service_host(fog_key)  # (swarm: the engine that runs the fog)
    wait_port(port, 120.0, backend.process(fog_key), host=fog_host)
    reach = backend.open_links(links, port, fog_host)
    outs = {d: ctx.run_dir / "nodes" / d / "offload.jsonl" for d in spec.devices}
    commands, origin, steps = {}, _clock(ctx, backend), snr_steps(spec, links)
    for i, d in enumerate(spec.devices):
        outs[d].parent.mkdir(parents=True, exist_ok=True)
        commands[d] = [sys.executable, "-m", "nodes.semantic.device", "--dir", str(folder),
                       "--fog", reach[d], "--first", str(i * share), "--count", str(share),
                       "--speed-factor", str(_speed(ctx, d)), "--out", str(outs[d]),
                       "--interval", str(spec.interval_s)]
        if d in steps:
            commands[d] += ["--snr-steps", json.dumps(steps[d]), "--clock-origin", str(origin)]
    keys = backend.start_processes(commands)
    return outs, [keys[d] for d in spec.devices]


def _wait_devices(backend: Backend, devices: list[str], chaos: ChaosEngine, timeout_s: float,
                  ctx: RunContext, expected: int, outs: dict[str, Path]) -> None:
    """Until every device process has exited (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        chaos.tick()
        alive = backend.alive()
        if not any(alive.get(d, False) for d in devices):
            return
        done = sum(len(p.read_text().splitlines()) for p in outs.values() if p.exists())
        ctx.progress("offloading", min(1.0, done / max(1, expected)))
        time.sleep(0.2)
    ctx.store.add_event(ctx.run_id, "offload_timeout", timeout_s=timeout_s)


def _per_inference(ctx: RunContext, rows: list[dict[str, Any]], labels: list[Any]) -> None:
    """Each answer's end-to-end latency [ms] and share of its K tasks answered right,
    at the time it was answered (measured)."""
    for r in rows:
        right = [p == labels[k][r["index"]] for k, p in enumerate(r["preds"])]
        tags = {"scheme": r["scheme"], "kind": "measured"} | (
            {"snr_db": r["snr_db"]} if "snr_db" in r else {})  # (the channel's, modelled)
        ctx.store.add_metric(ctx.run_id, "offload_e2e_ms", 1000.0 * float(r["e2e_s"]),
                             node=r["device"], ts=r["t"], tags=tags)
        ctx.store.add_metric(ctx.run_id, "offload_task_acc", sum(right) / len(right),
                             node=r["device"], ts=r["t"], tags=tags)


def _read(outs: dict[str, Path]) -> list[dict[str, Any]]:
    rows = []
    for device, path in outs.items():
        for line in path.read_text().splitlines() if path.exists() else []:
            rows.append({**json.loads(line), "device": device})
    return rows


def _scheme_metrics(ctx: RunContext, scheme: str, rows: list[dict[str, Any]],
                    ref: dict[str, Any], airtime: dict[str, float]) -> dict[str, Any]:
    """Record one scheme's metrics; return its summary."""
    labels, tasks = ref["labels"], ref["tasks"]
    out: dict[str, Any] = {"answers": len(rows), "airtime": airtime, "accuracy": {},
                           "in_process_accuracy": dict(zip(tasks, ref["in_process"][scheme],
                                                           strict=True))}

    def metric(name: str, value: float, kind: str, **tags: Any) -> None:
        ctx.metric({"name": name, "value": value,
                    "tags": {"workload": "semantic_offload", "scheme": scheme, "kind": kind,
                             **tags}})

    metric("answers", float(len(rows)), "measured")
    for k, task in enumerate(tasks):
        metric("in_process_accuracy", ref["in_process"][scheme][k], "measured", task=task)
        if not rows:  # nothing answered: no accuracy, no bytes were observed
            continue
        acc = sum(r["preds"][k] == labels[k][r["index"]] for r in rows) / len(rows)
        out["accuracy"][task] = acc
        metric("accuracy", acc, "measured", task=task)
    for key in ("e2e_s", "encode_device_s", "link_s", "decode_device_s", "round_trip_s"):
        vals = [float(r[key]) for r in rows]
        if vals:
            out[key] = statistics.median(vals)
            metric(f"{key.removesuffix('_s')}_median_s", out[key], "measured")
    for key in ("payload_bytes", "bytes_up", "bytes_down"):
        if rows:
            out[key] = rows[0][key]
            metric(key, float(out[key]), "measured", unit="bytes per inference")
    metric("channel_uses", float(ref["channel_uses"][scheme]), "computed", unit="REs")
    metric("airtime_s", airtime["symbol"], "modelled", granularity="ofdm_symbol")
    metric("airtime_slot_s", airtime["slot"], "modelled", granularity="slot")
    return out


def _radio_records(counters: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The mmwave links' model records (their windows are stored as ``radio_*``)."""
    return {
        node: {k: v for k, v in c["radio"].items() if k != "windows"}
        for node, c in counters.items()
        if c.get("radio")
    }


def _counters(ctx: RunContext, backend: Backend, devices: list[str]) -> dict[str, dict[str, Any]]:
    """The devices' link counters; recorded here when the fleet is this workload's own
    (a shared fleet records every link's once, when it stops)."""
    if ctx.fleet is not None:
        live = ctx.fleet.live_link_counters()
        return {d: live[d] for d in devices if d in live}
    counters: dict[str, dict[str, Any]] = backend.link_counters()
    record_link_counters(ctx.store, ctx.run_id, counters)
    return counters


def run_offload(ctx: RunContext) -> dict[str, Any]:
    """Run ``workload.semantic_offload``; return the summary (also ``offload.json``)."""
    from nodes.semantic.model import OffloadModel, train_offload

    spec = _section(ctx)
    links = device_links(ctx, spec)
    snr, snr_source = channel_snr_db(spec, links)
    folder = ctx.run_dir / "semantic"
    ref = train_offload(spec, ctx.seed, snr, len(spec.devices) * spec.requests, folder,
                        ctx.progress)
    share = ref["num_samples"] // len(spec.devices)
    backend = ctx.make_backend()
    counters: dict[str, dict[str, Any]] = {}
    outs = {d: ctx.run_dir / "nodes" / d / "offload.jsonl" for d in spec.devices}
    expected = share * len(spec.devices) * len(spec.schemes)
    try:
        outs, keys = _deploy(ctx, backend, spec, folder, links, share)
        chaos = ctx.chaos_engine(backend)
        chaos.start()
        _wait_devices(backend, keys, chaos, spec.timeout_s, ctx, expected, outs)
    finally:
        counters = _counters(ctx, backend, spec.devices)
        backend.stop()
    rows = _read(outs)
    _per_inference(ctx, rows, ref["labels"])
    schemes = {
        s: _scheme_metrics(ctx, s, [r for r in rows if r["scheme"] == s], ref,
                           OffloadModel(folder, s).airtime_s())
        for s in spec.schemes
    }
    summary = {
        "schemes": schemes, "snr_db": snr, "snr_source": snr_source,
        "samples_per_device": share, "devices": spec.devices, "fog": spec.fog,
        "radio": _radio_records(counters), "train": ref["train"],
        "status": "completed" if len(rows) == expected else "failed",
        "kinds": {"accuracy": "measured on the fleet", "in_process_accuracy": "measured "
                  "in the run's process, same model and channel realisations",
                  "airtime": "modelled (numerology, whole OFDM symbols / slots)",
                  "radio": "modelled (Sionna channel windows)"},
    }
    (ctx.run_dir / "offload.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary
