"""run_semantic_mux end to end on a tiny configuration: files, rows, kinds, callbacks."""

from __future__ import annotations

import csv
import json

import pytest

from radio.config import SemanticMuxSpec
from radio.experiment import SCHEMES, run_semantic_mux

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
    with (tmp_path / "results.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)
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
