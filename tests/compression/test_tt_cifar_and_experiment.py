"""CIFAR-10 loader on tiny generated batches; the experiment runner end to end (tiny)."""

import json
import os
import pickle

import numpy as np
import pytest
import torch

from nodes.compression.config import CompressSpec
from nodes.compression.data import CIFAR_MEAN, CIFAR_STD, load_cifar10
from nodes.compression.experiment import run_compress


def write_batch(path, n, seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = [int(x) for x in rng.integers(0, 10, size=n)]
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": b"x", b"labels": labels, b"data": data,
                     b"filenames": [b"f"] * n}, f)
    return data, labels


def test_cifar_loader_tiny(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    d1, l1 = write_batch(root / "data_batch_1", 6, 0)
    _, l2 = write_batch(root / "data_batch_2", 4, 1)
    dt, lt = write_batch(root / "test_batch", 5, 2)
    train = load_cifar10(tmp_path, train=True)
    assert train.x.shape == (10, 3, 32, 32) and train.y.tolist() == l1 + l2
    expect = (d1[0, 1024 + 32 * 3 + 4] / 255.0 - CIFAR_MEAN[1]) / CIFAR_STD[1]  # green, (3, 4)
    assert float(train.x[0, 1, 3, 4]) == pytest.approx(expect, abs=1e-5)
    test = load_cifar10(root, train=False, limit=3)
    assert test.x.shape == (3, 3, 32, 32) and test.y.tolist() == lt[:3]
    with pytest.raises(FileNotFoundError, match="cifar10_path"):
        load_cifar10(tmp_path / "missing", train=True)


def test_cifar_loader_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": []}, f)
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        load_cifar10(tmp_path, train=False)


def test_run_compress_tiny(tmp_path):
    spec = CompressSpec(eps_list=(0.5, 0.9), train_steps=40, finetune_steps=5, quick=True,
                        torch_threads=2)
    metrics, steps, threads = [], [], set()

    def progress(_desc, fraction):
        steps.append(fraction)
        threads.add(torch.get_num_threads())

    before = torch.get_num_threads()  # 1 (conftest), not the spec's 2
    summary = run_compress(spec, 0, tmp_path, report=metrics.append, progress=progress)
    for name in ("results.json", "results.csv", "tt_edge_accuracy.png",
                 "tt_edge_engine_modelled.png"):
        assert (tmp_path / name).is_file()
    rec = json.loads((tmp_path / "results.json").read_text())
    assert rec["engine_model"]["kind"] == "modelled"
    rows = summary["per_eps"]
    assert [r["eps"] for r in rows] == [0.5, 0.9]
    assert rows[1]["ratio"] > 1.0 and rows[1]["weight_rel_error"] <= 0.9 + 1e-6
    assert rows[1]["params_after"] < rows[1]["params_before"]
    assert summary["accuracy_before"] > 0.2  # 40 steps beat chance (0.1) on digits
    names = {m["name"] for m in metrics}
    assert {"accuracy_before", "ratio", "acc_after", "modelled_speedup_x"} <= names
    assert all(set(m) == {"name", "value", "step", "node", "tags"} for m in metrics)
    assert steps[0] == 0.0 and steps[-1] == 1.0
    assert threads == {spec.torch_threads} != {before}  # the run used the spec's threads
    assert torch.get_num_threads() == before  # and gave the caller's back


def test_run_compress_resnet32_on_tiny_cifar(tmp_path):
    data = tmp_path / "cifar"
    data.mkdir()
    write_batch(data / "data_batch_1", 24, 0)
    write_batch(data / "test_batch", 16, 1)
    spec = CompressSpec(dataset="cifar10", cifar10_path=str(data), eps_list=(0.8,),
                        train_steps=2, finetune_steps=1, batch_size=8,
                        model_engine_cost=False)
    assert spec.resolved_model() == "resnet32"
    summary = run_compress(spec, 0, tmp_path / "out")
    row = summary["per_eps"][0]
    assert row["layers_compressed"] == 30  # conv1 (432) and fc (640) are below min_numel
    assert row["ratio"] > 1.0 and row["modelled_speedup_x"] is None
    assert (tmp_path / "out" / "layers.csv").is_file()


def test_run_compress_validates_a_raw_mapping(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="eps_list"):
        run_compress({"eps_list": [3.0]}, 0, tmp_path)
