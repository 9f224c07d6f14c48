"""Runner of the semantic-multiplexing experiment (issue 6): ``run_semantic_mux``.

For every training seed (``seeds``, or the run's seed) and every K in ``num_tasks_list`` it
trains the registered ``schemes`` (``radio/schemes.py``) on the first K tasks, through the
configured channel (a bank of Sionna realisations), and evaluates them on fresh
realisations at every SNR of ``snr_db_list``:

* ``semantic_mux``: K tasks merged into ONE representation on S streams x L channel uses;
* ``joint_encoder``: one encoder over all K inputs, the same block and receiver;
* ``orthogonal_equal``: the same block split orthogonally between the K tasks;
* ``orthogonal``: baseline (a), one semantic stream per task, streams then time slots;
* ``bit_level``: baseline (b), quantised features, 5G LDPC, QAM, LMMSE, decode.

A seed drives everything random of its repetition: data split, channel banks, noise, data
order and weights. Per-seed rows carry their ``seed``; the aggregate rows (mean, sample
std, ``num_seeds``; ``radio/aggregate.py``) are reported through ``report`` when all seeds
are done and are ``rows`` of ``results.json`` (``seed_rows`` holds the per-seed ones; after
each seed ``results_seed<N>.json`` is written, so a run that dies keeps finished seeds).
``results.csv`` holds both kinds. Every row has ``kind``: ``measured`` (accuracy on the
simulated channel, compute time, channel-use counts, parameter counts) or ``modelled``
(airtime from the numerology, latency including airtime, energy).
"""

from __future__ import annotations

import csv
import json
import math
import pathlib
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radio.aggregate import aggregate_rows
from radio.config import SemanticMuxSpec
from radio.scheme_registry import BUILTIN_SCHEMES

__all__ = ["run_semantic_mux", "SCHEMES"]

#: The built-in schemes (the registry ``radio.scheme_registry.SCHEMES`` takes user ones).
SCHEMES = BUILTIN_SCHEMES


def _build(scheme: str, spec: SemanticMuxSpec, tasks, channel):
    """The registered scheme ``scheme`` for ``tasks`` on ``channel`` (untrained)."""
    from radio.schemes import build_scheme

    return build_scheme(scheme, spec, tasks, channel)


class _Rows:
    """The run's metric rows; each is also reported (``report``) as it is made."""

    def __init__(self, seed: int) -> None:
        self.rows: list[dict] = []
        self.seed = seed

    def emit(self, name, value, kind, unit, scheme, k, snr=None, task=None) -> None:
        self.rows.append({"name": name, "value": float(value), "kind": kind, "unit": unit,
                          "scheme": scheme, "num_tasks": k, "snr_db": snr, "task": task,
                          "seed": self.seed})


def _report_rows(rows: list[dict], report: Callable[[dict], None] | None) -> None:
    """Report every row as ``{"name", "value", "step", "node", "tags"}``."""
    if report is None:
        return
    for row in rows:
        tags = {key: v for key, v in row.items() if key not in ("name", "value")}
        report({"name": row["name"], "value": float(row["value"]), "step": None,
                "node": None, "tags": tags})


@dataclass
class _Setup:
    """What every (K, scheme) job shares: runtime, channels and their banks, tasks."""

    spec: SemanticMuxSpec
    rt: Any
    gen: Any
    num: Any
    energy: Any
    channel: Any
    train_channel: Any
    tasks: list
    data_all: Any
    cfg: Any
    h_train: Any
    h_eval: Any
    n_eval: int
    draws: int
    bank_size: int


def _prepare(spec: SemanticMuxSpec, seed: int, say: Callable[[str, float], None]) -> _Setup:
    """Resolve the runtime, build the channels, load the tasks, draw the channel banks."""
    from radio.channel import MIMOChannel
    from radio.energy import EnergyModel
    from radio.numerology import Numerology
    from radio.runtime import resolve_runtime
    from radio.tasks import build_task
    from radio.train import TaskTensors, TrainConfig

    rt = resolve_runtime(seed, None if spec.device == "auto" else spec.device)
    gen = rt.generator()
    num = Numerology(spec.subcarrier_spacing_hz, spec.num_resource_blocks)
    energy = EnergyModel(spec.energy.radio_power_w, spec.energy.compute_power_w)

    def make_channel(model: str) -> MIMOChannel:
        return MIMOChannel(
            model, spec.channel_profile, spec.carrier_frequency_hz, num, spec.num_tx_antennas,
            spec.num_rx_antennas, spec.delay_spread_s, spec.max_speed_mps,
            spec.subcarriers_per_block, spec.flat_correlation, device=rt.device,
        )

    channel = make_channel(spec.channel_model)
    train_channel = channel if spec.train_channel == "same" else make_channel("flat")

    k_max = max(spec.num_tasks_list)
    say("loading tasks", 0.0)
    tasks = [build_task(n, seed, spec.cifar10_dir, spec.text_csv_path) for n in spec.tasks[:k_max]]
    data_all = TaskTensors(tasks, rt.device, gen)

    # Channel banks. Blocks must hold the largest scheme's channel uses.
    s = spec.num_tx_antennas
    max_orth = math.ceil(k_max / s) * spec.orthogonal_channel_uses_per_task
    probe_bits = _build("bit_level", spec, tasks, channel).channel_uses()
    t_train = channel.num_ofdm_symbols(max(spec.mux_channel_uses, max_orth))
    t_eval = channel.num_ofdm_symbols(max(spec.mux_channel_uses, max_orth, probe_bits))
    n_eval = min(data_all.num_test, spec.quick_eval_samples) if spec.quick else data_all.num_test
    draws = 1 if spec.quick else spec.eval_channel_draws
    bank_size = min(spec.channel_bank_size, 1024) if spec.quick else spec.channel_bank_size
    say(f"drawing {bank_size} training channel blocks ({spec.channel_model})", 0.02)
    h_train = train_channel.generate(bank_size, t_train)
    say(f"drawing {n_eval * draws} evaluation channel blocks", 0.05)
    h_eval = channel.generate(n_eval * draws, t_eval)

    cfg = TrainConfig(
        spec.effective_train_steps, spec.batch_size, spec.learning_rate,
        spec.train_snr_min_db, spec.train_snr_max_db, spec.vib_beta,
    )
    return _Setup(spec, rt, gen, num, energy, channel, train_channel, tasks, data_all, cfg,
                  h_train, h_eval, n_eval, draws, bank_size)


def _run_job(
    st: _Setup, k: int, scheme: str, out: _Rows, say: Callable[[str, float], None],
    base: float, span: float,
) -> dict:
    """Train ``scheme`` on the first ``k`` tasks, evaluate it at every SNR, time it.

    ``base`` and ``span`` place the job in the overall progress [0, 1].
    """
    from radio.train import evaluate_system, measure_compute_s, train_system

    spec, emit = st.spec, out.emit
    data = st.data_all.subset(k)
    system = _build(scheme, spec, st.tasks[:k], st.train_channel).to(st.rt.device)
    desc = f"training {scheme}, K={k}"
    say(desc, base)

    def train_progress(f: float) -> None:
        say(desc, base + 0.7 * span * f)

    tr = train_system(system, data, st.cfg, st.h_train, st.gen, progress=train_progress)
    system.channel = st.channel
    emit("train_time_s", tr["train_time_s"], "measured", "s", scheme, k)
    emit("num_parameters", sum(p.numel() for p in system.parameters()), "measured",
         "trainable parameters", scheme, k)
    emit("train_final_loss", tr["final_loss"], "measured", "nats", scheme, k)
    say(f"evaluating {scheme}, K={k}", base + 0.7 * span)
    acc_by_snr = {}
    for snr in spec.snr_db_list:
        acc = evaluate_system(system, data, st.h_eval, snr, st.n_eval, st.draws)
        acc_by_snr[snr] = acc
        for t, a in zip(st.tasks[:k], acc, strict=True):
            emit("accuracy", a, "measured", "fraction", scheme, k, snr, t.name)
        emit("mean_accuracy", sum(acc) / k, "measured", "fraction", scheme, k, snr)
    comp = measure_compute_s(system, data, st.h_eval, spec.latency_batch_size,
                              reps=5 if spec.quick else 20)
    uses = system.channel_uses()
    load = uses * system.active_streams()
    air = st.num.airtime_s(uses)
    compute_s = comp["tx_s"] + comp["rx_s"]
    m = {
        "channel_uses": uses, "load_symbols": load, "airtime_s": air,
        "compute_tx_s": comp["tx_s"], "compute_rx_s": comp["rx_s"], "compute_s": compute_s,
        "latency_s": st.energy.latency_s(air, compute_s),
        "energy_j": st.energy.energy_j(air, compute_s),
        "accuracy": acc_by_snr,
    }
    emit("channel_uses", uses, "measured", "REs per inference", scheme, k)
    emit("communication_load_symbols", load, "measured", "complex symbols per inference",
         scheme, k)
    emit("airtime_s", air, "modelled", "s", scheme, k)
    emit("compute_tx_s", comp["tx_s"], "measured", "s", scheme, k)
    emit("compute_rx_s", comp["rx_s"], "measured", "s", scheme, k)
    emit("compute_latency_s", compute_s, "measured", "s", scheme, k)
    emit("latency_s", m["latency_s"], "modelled", "s", scheme, k)
    emit("energy_j", m["energy_j"], "modelled", "J", scheme, k)
    return m


def _ratios(spec: SemanticMuxSpec, per_scheme: dict, out: _Rows) -> dict:
    """Ratios baseline / semantic mux (> 1 means the mux is better), and the accuracy
    gain of the mux over each baseline at every SNR."""
    ratios = {}
    for k in spec.num_tasks_list:
        mux = per_scheme[(k, "semantic_mux")]
        for baseline in (sc for sc in spec.schemes if sc != "semantic_mux"):
            b = per_scheme[(k, baseline)]
            for key, kind in (("latency_s", "modelled"), ("energy_j", "modelled"),
                              ("load_symbols", "measured"), ("channel_uses", "measured"),
                              ("airtime_s", "modelled"), ("compute_s", "measured")):
                r = b[key] / mux[key] if mux[key] > 0 else math.nan
                ratios[(k, baseline, key)] = r
                out.emit(f"ratio_{key}", r, kind, f"{baseline} / semantic_mux", baseline, k)
            for snr in spec.snr_db_list:
                d = (sum(mux["accuracy"][snr]) - sum(b["accuracy"][snr])) / k
                out.emit("accuracy_gain_vs_baseline", d, "measured",
                         "fraction (mux - baseline)", baseline, k, snr)
    return ratios


def _first_task_drop(spec: SemanticMuxSpec, per_scheme: dict, tasks: list, out: _Rows) -> dict:
    """Accuracy drop of the first task (image classification) from smallest to largest K."""
    k_lo, k_hi = min(spec.num_tasks_list), max(spec.num_tasks_list)
    drop = {}
    for snr in spec.snr_db_list:
        a_lo = per_scheme[(k_lo, "semantic_mux")]["accuracy"][snr][0]
        a_hi = per_scheme[(k_hi, "semantic_mux")]["accuracy"][snr][0]
        drop[snr] = a_lo - a_hi
        out.emit("first_task_accuracy_drop", a_lo - a_hi, "measured",
                 f"fraction, K={k_lo} minus K={k_hi}", "semantic_mux", k_hi, snr, tasks[0].name)
    return drop


def _meta(st: _Setup, seed: int) -> dict:
    """Seed, spec, runtime, machine, numerology, energy model, tasks and evaluation size."""
    import torch

    spec, num, rt, cfg = st.spec, st.num, st.rt, st.cfg
    return {
        "seed": seed,
        "spec": spec.model_dump(mode="json"),
        "runtime": {"device": rt.device, "reason": rt.reason, "dtype": "float32"},
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads()},
        "numerology": {"subcarrier_spacing_hz": num.subcarrier_spacing_hz, "mu": num.mu,
                       "num_subcarriers": num.num_subcarriers, "bandwidth_hz": num.bandwidth_hz,
                       "symbol_rate_per_s": num.symbol_rate_per_s},
        "energy_model": {"formula": "energy_j = radio_power_w * airtime_s + "
                                    "compute_power_w * compute_s",
                         **spec.energy.model_dump(), "kind": "modelled"},
        "tasks": [{"name": t.name, "num_classes": t.num_classes,
                   "chance_accuracy": t.chance_accuracy, "num_test": len(t.y_test)}
                  for t in st.tasks],
        "eval": {"samples_per_task": st.n_eval, "channel_draws": st.draws,
                 "train_steps": cfg.steps, "bank_size": st.bank_size},
    }


def _run_seed(
    spec: SemanticMuxSpec, seed: int, say: Callable[[str, float], None]
) -> tuple[_Setup, list[dict], dict]:
    """One repetition with ``seed``: every scheme at every K; returns the setup, the
    seed's rows and its ratios (baseline / semantic_mux)."""
    st = _prepare(spec, seed, say)
    out = _Rows(seed)
    jobs = [(k, sc) for k in spec.num_tasks_list for sc in spec.schemes]
    per_scheme: dict[tuple[int, str], dict] = {}
    for j, (k, scheme) in enumerate(jobs):
        base = 0.08 + 0.9 * j / len(jobs)
        per_scheme[(k, scheme)] = _run_job(st, k, scheme, out, say, base, 0.9 / len(jobs))
    ratios = _ratios(spec, per_scheme, out)
    _first_task_drop(spec, per_scheme, st.tasks, out)
    return st, out.rows, ratios


def _write_json(path: pathlib.Path, doc: dict) -> None:
    with path.open("w") as fh:
        json.dump(doc, fh, indent=1)


def _write_csv(path: pathlib.Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(key for r in rows for key in r))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def run_semantic_mux(
    spec: SemanticMuxSpec,
    seed: int,
    out_dir: pathlib.Path,
    report: Callable[[dict], None] | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> dict:
    """Run the experiment; write results.json, results.csv and PNG plots into ``out_dir``.

    Parameters
    ----------
    spec : SemanticMuxSpec
        Validated configuration.
    seed : int
        The run's seed; the training seeds are ``spec.seeds``, or ``(seed,)`` if unset.
        A training seed seeds the single random source (split, channels, noise, data
        order, weights) of its repetition.
    out_dir : pathlib.Path
        Output folder (created if missing).
    report : callable(dict) or None
        Called once per AGGREGATE metric row (after the last seed) with
        ``{"name", "value", "step", "node", "tags"}``; tags include ``std`` and
        ``num_seeds``.
    progress : callable(str, float) or None
        Called with a description and the fraction done in [0, 1].

    Returns
    -------
    dict
        Summary: headline ratios (means over seeds), accuracy drop, seeds, paths of the
        files written, wall time.
    """
    from radio.plots import plot_all

    t_start = time.perf_counter()
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    say = progress or _no_progress
    seeds = list(spec.seeds) if spec.seeds is not None else [seed]
    seed_rows: list[dict] = []
    seed_wall: dict[str, float] = {}
    st = None
    for i, s in enumerate(seeds):
        t_seed = time.perf_counter()

        def say_seed(desc: str, f: float, i: int = i, s: int = s) -> None:
            say(f"seed {s}: {desc}", 0.99 * (i + f) / len(seeds))

        st, rows, _ = _run_seed(spec, s, say_seed)
        seed_rows.extend(rows)
        seed_wall[str(s)] = time.perf_counter() - t_seed
        _write_json(out_dir / f"results_seed{s}.json",
                    {"meta": _meta(st, s), "rows": rows, "wall_time_s": seed_wall[str(s)]})
    assert st is not None
    rows = aggregate_rows(seed_rows)
    _report_rows(rows, report)

    say("plotting", 0.99)
    plots = plot_all(rows, spec, st.tasks, out_dir)
    # tasks (chance accuracies) and evaluation sizes are those of the last seed's split
    meta = {**_meta(st, seed), "run_seed": seed, "seeds": seeds, "tasks_from_seed": seeds[-1],
            "seed_wall_time_s": seed_wall}
    wall = time.perf_counter() - t_start
    ratios = {f"K={r['num_tasks']} {r['scheme']} {r['name'].removeprefix('ratio_')}": r["value"]
              for r in rows if r["name"].startswith("ratio_")}
    summary = {
        "kind_note": "ratios are baseline / semantic_mux, means over the seeds; see rows "
                     "for kinds and std",
        "seeds": seeds,
        "ratios": ratios,
        "first_task_accuracy_drop": {str(r["snr_db"]): r["value"] for r in rows
                                     if r["name"] == "first_task_accuracy_drop"},
        "wall_time_s": wall,
        "files": ["results.json", "results.csv", *plots],
    }
    _write_json(out_dir / "results.json",
                {"meta": meta, "summary": summary, "rows": rows, "seed_rows": seed_rows})
    _write_csv(out_dir / "results.csv", seed_rows + rows)
    say("done", 1.0)
    return summary


def _no_progress(_desc: str, _fraction: float) -> None:
    """Progress callback that ignores the progress."""
