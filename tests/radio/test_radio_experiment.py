"""run_semantic_mux end to end on a tiny configuration: files, rows, kinds, callbacks."""

from __future__ import annotations

import csv
import json

import pytest

from radio.config import SemanticMuxSpec
from radio.experiment import SCHEMES, run_semantic_mux
from radio.report import results_markdown

MEASURED_OR_MODELLED = {"measured", "modelled"}
COUNT_TOL = 1e-4  # float32 accuracy times the sample count vs the nearest whole number


def test_run_semantic_mux_tiny(tmp_path):
    spec = SemanticMuxSpec(
        quick=True, quick_train_steps=15, quick_eval_samples=40, channel_bank_size=64,
        num_tasks_list=(2, 4), snr_db_list=(0.0, 20.0), tasks=("digit", "parity", "prime", "ink"),
        batch_size=32,
    )
    reported, progress = [], []
    summary = run_semantic_mux(spec, 0, tmp_path, reported.append,
                               lambda d, f: progress.append((d, f)))
    for f in summary["files"]:
        assert (tmp_path / f).stat().st_size > 0, f
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = doc["rows"]
    assert len(rows) == len(reported)
    assert {r["kind"] for r in rows} == MEASURED_OR_MODELLED
    assert all(set(r) == {"name", "value", "step", "node", "tags"} for r in reported)
    assert all(isinstance(r["value"], float) and r["node"] is None for r in reported)
    with (tmp_path / "results.csv").open() as fh:  # per-seed rows, then the aggregates
        assert len(list(csv.DictReader(fh))) == len(doc["seed_rows"]) + len(rows)
    # one seed (seeds unset: the run's seed): aggregates equal the seed's rows, no spread
    assert doc["meta"]["seeds"] == [0] and {r["seed"] for r in doc["seed_rows"]} == {0}
    assert [r["value"] for r in rows] == [r["value"] for r in doc["seed_rows"]]
    assert all(r["std"] is None and r["num_seeds"] == 1 for r in rows)
    # every scheme and K has accuracy at every SNR, and the modelled energy/latency.
    # quick mode evaluates each task on quick_eval_samples samples and one channel draw,
    # so an accuracy is a whole number of correct answers out of that many
    evaluated = spec.quick_eval_samples
    ev = doc["meta"]["eval"]
    assert (ev["samples_per_task"], ev["channel_draws"]) == (evaluated, 1)
    for k in (2, 4):
        for sc in SCHEMES:
            acc = [r for r in rows if r["name"] == "accuracy" and r["scheme"] == sc
                   and r["num_tasks"] == k]
            assert len(acc) == k * 2
            for r in acc:
                correct = r["value"] * evaluated
                assert abs(correct - round(correct)) < COUNT_TOL, (r, correct)
            for snr in spec.snr_db_list:  # the mean row is the mean of the task rows
                tasks = [r["value"] for r in acc if r["snr_db"] == snr]
                mean = [r["value"] for r in rows if r["name"] == "mean_accuracy"
                        and r["scheme"] == sc and r["num_tasks"] == k and r["snr_db"] == snr]
                assert mean == [pytest.approx(sum(tasks) / k)]
            energy = [r for r in rows if r["name"] == "energy_j" and r["scheme"] == sc
                      and r["num_tasks"] == k]
            assert energy[0]["kind"] == "modelled" and energy[0]["value"] > 0
    uses = {(r["scheme"], r["num_tasks"]): r["value"] for r in rows if r["name"] == "channel_uses"}
    assert uses[("semantic_mux", 2)] == uses[("semantic_mux", 4)] == spec.mux_channel_uses
    assert uses[("orthogonal", 4)] == spec.orthogonal_channel_uses_per_task
    assert doc["meta"]["energy_model"]["kind"] == "modelled"
    fractions = [f for _, f in progress]  # from 0 to 1, never going back
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)


def test_seeds_give_mean_and_spread(tmp_path):
    spec = SemanticMuxSpec(
        quick=True, quick_train_steps=10, quick_eval_samples=30, channel_bank_size=64,
        num_tasks_list=(2,), snr_db_list=(5.0,), tasks=("digit", "parity"), batch_size=16,
        seeds=(4, 7), schemes=("semantic_mux", "orthogonal_equal"),
    )
    reported = []
    summary = run_semantic_mux(spec, 123, tmp_path, reported.append)
    assert summary["seeds"] == [4, 7]
    doc = json.loads((tmp_path / "results.json").read_text())
    meta = doc["meta"]
    assert (meta["seeds"], meta["run_seed"], meta["tasks_from_seed"]) == ([4, 7], 123, 7)
    seed_rows, rows = doc["seed_rows"], doc["rows"]
    assert {r["seed"] for r in seed_rows} == {4, 7} and len(seed_rows) == 2 * len(rows)
    for s in (4, 7):  # written after each seed, so a run that dies keeps them
        part = json.loads((tmp_path / f"results_seed{s}.json").read_text())
        assert part["rows"] == [r for r in seed_rows if r["seed"] == s]
    key = ("name", "scheme", "num_tasks", "snr_db", "task")
    for r in rows:
        vals = [x["value"] for x in seed_rows if all(x[k] == r[k] for k in key)]
        assert len(vals) == r["num_seeds"] == 2
        assert r["value"] == pytest.approx(sum(vals) / 2)
        assert r["std"] == pytest.approx(abs(vals[0] - vals[1]) / 2**0.5)
    # the seeds train different models: some accuracy differs between them
    acc = [r for r in rows if r["name"] == "accuracy"]
    assert any(r["std"] > 0 for r in acc)
    # only the aggregates are reported, with their spread in the tags
    assert len(reported) == len(rows)
    assert all({"std", "num_seeds"} <= set(r["tags"]) for r in reported)
    uses = {r["scheme"]: r["value"] for r in rows if r["name"] == "communication_load_symbols"}
    assert uses == {"semantic_mux": 32.0, "orthogonal_equal": 32.0}
    md = results_markdown(tmp_path / "results.json")
    assert "over 2 training seeds [4, 7]" in md and " ± " in md and "orthogonal_equal" in md
    assert "seed 7's test split" in md and "| 32 |" in md  # counts without "± 0"
    # a run stopped after its first seed: the tables come from results_seed4.json alone
    (tmp_path / "results.json").unlink()
    (tmp_path / "results_seed7.json").unlink()
    partial = results_markdown(tmp_path)
    assert "one training seed [4], no spread" in partial and " ± " not in partial
    first = [r for r in seed_rows if r["seed"] == 4 and r["name"] == "mean_accuracy"][0]
    assert f"| {first['value']:.3f} |" in partial
