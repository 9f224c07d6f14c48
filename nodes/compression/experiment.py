"""The ``compress`` workload: train, TT-compress per eps, evaluate, fine-tune, model the engine.

Entry point :func:`run_compress`. Per eps it MEASURES compression ratio, weight
reconstruction error, accuracy before / after / after fine-tuning and compression wall
time on this machine, and MODELS (labelled ``modelled``) GEMM-only vs engine-assisted
time and energy from the SVD FLOPs per phase counted by the two_phase back-end.
"""

from __future__ import annotations

import copy
import csv
import importlib
import json
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from nodes.compression.config import CompressSpec
from nodes.compression.cost_model import (
    PAPER_REFERENCE,
    EngineProfile,
    get_profile,
    modelled_cost,
    profile_record,
)
from nodes.compression.data import Split, load_cifar10, load_digits_split
from nodes.compression.layers import compress_module
from nodes.compression.resnet import resnet32
from nodes.compression.svd import PAPER_PHASES, SvdStats
from nodes.compression.train import DigitsCNN, accuracy, train_steps

Record = dict[str, Any]
"""A JSON record: a metric report, a per-eps or per-layer row, the summary."""
Report = Callable[[Record], None]
Progress = Callable[[str, float], None]
CSV_FIELDS = (
    "eps", "ratio", "params_before", "params_after", "layers_compressed", "weight_rel_error",
    "max_layer_rel_error", "acc_before", "acc_after", "acc_finetuned", "compress_seconds",
    "finetune_seconds", "modelled_gemm_only_s", "modelled_engine_s", "modelled_speedup_x",
    "modelled_energy_saving_pct",
)


def build_model(name: str, num_classes: int = 10) -> nn.Module:
    """Model by registry name or ``"package.module:factory"``."""
    if name == "digits_cnn":
        return DigitsCNN(num_classes)
    if name == "resnet32":
        return resnet32(num_classes)
    module, _, attr = name.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    model = factory()
    if not isinstance(model, nn.Module):
        raise ValueError(f"model factory {name!r} returned {type(model).__name__}, not nn.Module")
    return model


def load_data(spec: CompressSpec, seed: int) -> tuple[Split, Split]:
    """Train and test splits for ``spec.dataset``."""
    if spec.dataset == "digits":
        return load_digits_split(spec.test_fraction, seed)
    assert spec.cifar10_path is not None  # validated by CompressSpec
    tr_lim, te_lim = spec.train_limit, spec.test_limit
    if spec.quick:
        tr_lim, te_lim = min(tr_lim or 1000, 1000), min(te_lim or 500, 500)
    path = spec.cifar10_path
    return load_cifar10(path, True, tr_lim), load_cifar10(path, False, te_lim)


def _budget(spec: CompressSpec) -> tuple[int, float, int]:
    """(train_steps, train_max_seconds, finetune_steps), shrunk when ``quick``."""
    if spec.quick:
        return min(spec.train_steps, 300), min(spec.train_max_seconds, 30.0), min(
            spec.finetune_steps, 30)
    return spec.train_steps, spec.train_max_seconds, spec.finetune_steps


def _count_phases(model: nn.Module, spec: CompressSpec, eps: float) -> SvdStats:
    """SVD FLOPs per phase of this compression, counted with the two_phase back-end."""
    res = compress_module(model, eps, spec.max_rank, spec.min_numel, "two_phase", spec.max_modes)
    return res.svd_stats


def _plot(rows: list[Record], out_dir: pathlib.Path, title: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = [r["eps"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    ax.plot(eps, [r["acc_before"] for r in rows], "k--", label="before (measured)")
    ax.plot(eps, [r["acc_after"] for r in rows], "o-", label="after TT (measured)")
    ax.plot(eps, [r["acc_finetuned"] for r in rows], "s-", label="after fine-tune (measured)")
    ax.set_xlabel("eps (relative TT-SVD error bound)")
    ax.set_ylabel("test accuracy")
    ax.legend()
    ax.set_title(title)
    ax = axes[1]
    ax.plot(eps, [r["ratio"] for r in rows], "o-", label="model compression ratio (measured)")
    ax.plot(eps, [r["weight_rel_error"] for r in rows], "s-", label="weight rel. error (measured)")
    ax.set_xlabel("eps")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    path = out_dir / "tt_edge_accuracy.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files = [path.name]
    if all(r.get("modelled_engine_s") is not None for r in rows):
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.plot(eps, [r["modelled_gemm_only_s"] * 1e3 for r in rows], "o-", label="GEMM-only")
        ax.plot(eps, [r["modelled_engine_s"] * 1e3 for r in rows], "s-", label="engine")
        ax.set_xlabel("eps")
        ax.set_ylabel("MODELLED compression time (ms)")
        ax.set_title("MODELLED (cost model, not measured)")
        ax.legend()
        fig.tight_layout()
        path = out_dir / "tt_edge_engine_modelled.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path.name)
    return files


def run_compress(
    spec: CompressSpec | Mapping[str, Any],
    seed: int,
    out_dir: pathlib.Path,
    report: Report | None = None,
    progress: Progress | None = None,
) -> Record:
    """Run the TT-Edge compression experiment.

    Parameters
    ----------
    spec : CompressSpec
        Validated settings (a plain mapping is validated into one here, so a caller that
        still holds the raw ``workload.compress`` dict gets the same errors).
    seed : int
        Seeds data split, initialization and sampling.
    out_dir : pathlib.Path
        Receives ``results.json``, ``results.csv``, ``layers.csv`` and PNG plots.
    report : callable, optional
        Called with ``{"name", "value", "step", "node", "tags"}`` per metric.
    progress : callable, optional
        Called with ``(description, fraction in [0, 1])``.

    Returns
    -------
    dict
        Summary: accuracy before, per-eps ratio/error/accuracies, files written.
    """
    if isinstance(spec, Mapping):
        spec = CompressSpec(**spec)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _d, _f: None)
    emit = report or (lambda _m: None)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(spec.torch_threads)
    try:
        return _run(spec, seed, out_dir, emit, say)
    finally:
        torch.set_num_threads(old_threads)


def _metric(emit: Report, name: str, value: float, step: int | None, **tags: object) -> None:
    emit({"name": name, "value": float(value), "step": step, "node": None,
          "tags": {k: str(v) for k, v in tags.items()}})


def _run(spec: CompressSpec, seed: int, out_dir: pathlib.Path, emit: Report,
         say: Progress) -> Record:
    t_start = time.perf_counter()
    torch.manual_seed(seed)
    say("loading data", 0.0)
    train, test = load_data(spec, seed)
    model_name = spec.resolved_model()
    model = build_model(model_name)
    steps, max_s, ft_steps = _budget(spec)
    say(f"training {model_name}", 0.05)
    tr = train_steps(model, train, steps, spec.train_lr, spec.batch_size, seed, max_s)
    acc0 = accuracy(model, test)
    _metric(emit, "accuracy_before", acc0, None, kind="measured")
    profile = get_profile(spec.engine_profile, dict(spec.engine_overrides))
    rows: list[Record] = []
    layer_rows: list[Record] = []
    n = len(spec.eps_list)
    for i, eps in enumerate(spec.eps_list):
        say(f"compressing eps={eps}", 0.1 + 0.85 * i / n)
        t0 = time.perf_counter()
        res = compress_module(model, eps, spec.max_rank, spec.min_numel, spec.svd_backend,
                              spec.max_modes)
        comp_s = time.perf_counter() - t0
        acc1 = accuracy(res.model, test)
        tuned = copy.deepcopy(res.model)
        ft = train_steps(tuned, train, ft_steps, spec.finetune_lr, spec.batch_size, seed + 1)
        acc2 = accuracy(tuned, test) if ft_steps > 0 else acc1
        row: Record = {
            "eps": eps, "ratio": res.ratio, "params_before": res.params_before,
            "params_after": res.params_after, "layers_compressed": len(res.layers),
            "weight_rel_error": res.weight_rel_error,
            "max_layer_rel_error": max((lr.rel_error for lr in res.layers), default=0.0),
            "acc_before": acc0, "acc_after": acc1, "acc_finetuned": acc2,
            "compress_seconds": comp_s, "finetune_seconds": ft["seconds"],
            "modelled_gemm_only_s": None, "modelled_engine_s": None,
            "modelled_speedup_x": None, "modelled_energy_saving_pct": None,
        }
        if spec.model_engine_cost:
            stats = res.svd_stats if spec.svd_backend == "two_phase" else _count_phases(
                model, spec, eps)
            phases = stats.by_paper_phase()
            cost = modelled_cost(phases["bidiagonalization"].flops,
                                 phases["diagonalization"].flops, profile)
            row["modelled_gemm_only_s"] = cost["gemm_only_s"]
            row["modelled_engine_s"] = cost["engine_s"]
            row["modelled_speedup_x"] = cost["speedup_x"]
            row["modelled_energy_saving_pct"] = cost["energy_saving_pct"]
            row["modelled_detail"] = cost
            row["two_phase_measured_seconds"] = {
                k: v.seconds for k, v in phases.items()}
        rows.append(row)
        for lr in res.layers:
            layer_rows.append({"eps": eps, **lr.as_dict()})
        for key in ("ratio", "weight_rel_error", "acc_after", "acc_finetuned", "compress_seconds"):
            _metric(emit, key, row[key], i, eps=eps, kind="measured")
        if row["modelled_speedup_x"] is not None:
            for key in ("modelled_speedup_x", "modelled_energy_saving_pct"):
                _metric(emit, key, row[key], i, eps=eps, kind="modelled",
                        profile=profile.name)
    say("writing results", 0.97)
    files = _write(out_dir, spec, seed, model_name, tr, rows, layer_rows, profile)
    say("done", 1.0)
    return {
        "name": "tt-edge", "model": model_name, "dataset": spec.dataset,
        "accuracy_before": acc0, "train": tr,
        "per_eps": [{k: r[k] for k in CSV_FIELDS} for r in rows],
        "files": files, "seconds": time.perf_counter() - t_start,
    }


def _write(out_dir: pathlib.Path, spec: CompressSpec, seed: int, model_name: str,
           tr: dict[str, float], rows: list[Record], layer_rows: list[Record],
           profile: EngineProfile) -> list[str]:
    record = {
        "spec": spec.model_dump(mode="json"), "seed": seed, "model": model_name,
        "train": tr, "rows": rows, "layers": layer_rows,
        "engine_model": {"kind": "modelled", "profile": profile_record(profile),
                         "phases": {k: list(v) for k, v in PAPER_PHASES.items()},
                         "paper_reference_not_our_result": PAPER_REFERENCE},
        "versions": {"torch": torch.__version__},
    }
    (out_dir / "results.json").write_text(json.dumps(record, indent=2, default=str))
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if layer_rows:
        with open(out_dir / "layers.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(layer_rows[0]), extrasaction="ignore")
            w.writeheader()
            w.writerows(layer_rows)
    files = ["results.json", "results.csv"] + (["layers.csv"] if layer_rows else [])
    return files + _plot(rows, out_dir, f"{model_name} on {spec.dataset}")

