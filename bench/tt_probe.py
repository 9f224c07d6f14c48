"""In-process probe of TT uplink settings: FedAvg over the fleet's own client code path.

Runs ``experiments/tt_fl.yaml``'s task (digits IID, the 2-conv CNN, 3 silos, 2 local
epochs) without a fleet: the server's initial model, each silo's training
(``task.train`` with the ClientApp's seed), the TT uplink (``task.encode_delta`` with
error feedback in a per-silo ``RecordDict``, ``task.decode_delta``) and FedAvg weighted
by examples, all in one process, ~1-2 s per configuration and seed. It is for choosing
settings before the fleet study (``testbed run experiments/tt_fl.yaml``), whose figures
are the ones to report; its payload counts the same array buffers as the ServerApp's
``bytes_received`` (the fleet's float32 baseline sends the same 2,774,736 bytes).

    python bench/tt_probe.py --rounds 6 --seeds 7,8,9 \\
        '{"compression": "none"}' '{"compression": "tt", "eps": 0.5, "tensorization": "auto"}'
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nodes.fl import task  # noqa: E402
from nodes.fl.config import FLSpec  # noqa: E402

SILOS = 3
TASK: dict[str, Any] = {
    "dataset": {"name": "digits"}, "partitioner": {"name": "iid"}, "model": {"name": "cnn"},
    "local_epochs": 2, "batch_size": 32, "lr": 0.05,
}


def run(uplink: dict[str, Any], seed: int, rounds: int) -> tuple[list[float], int]:
    """Global accuracy after each round (round 0 first) and the total uplink payload
    (bytes) of one FedAvg run with this ``workload.fl.uplink``."""
    import torch
    from flwr.app import ArrayRecord, RecordDict

    task.deterministic_torch()
    spec = FLSpec.model_validate({**TASK, "rounds": rounds, "uplink": uplink})
    splits = task.get_splits(spec, seed, SILOS)
    torch.manual_seed(seed)  # as the ServerApp builds its initial model
    model = task.make_model(spec, splits)
    states = [RecordDict() for _ in range(SILOS)]
    accs = [task.evaluate(model, splits.server_test)[1]]
    payload = 0
    for rnd in range(1, rounds + 1):
        glob = ArrayRecord(model.state_dict())
        base = {k: v.numpy() for k, v in glob.items()}
        replies, weights = [], []
        for pid in range(SILOS):
            local = task.load(task.make_model(spec, splits), glob)
            task.train(local, splits.silo_train[pid], spec, seed * 1000 + rnd)
            if spec.uplink.compression == "tt":
                sent = task.encode_delta(local, glob, spec.uplink, states[pid])
                payload += task.array_nbytes(sent)
                replies.append(task.decode_delta(sent, base))
            else:
                reply = ArrayRecord(local.state_dict())
                payload += task.array_nbytes(reply)
                replies.append(reply)
            weights.append(float(len(splits.silo_train[pid])))
        task.load(model, task.weighted_average(replies, weights))
        accs.append(task.evaluate(model, splits.server_test)[1])
    return accs, payload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("uplinks", nargs="+", help="workload.fl.uplink settings as JSON")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seeds", default="7,8,9", help="comma-separated")
    args = ap.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    base: dict[int, tuple[float, int]] = {}
    print("| uplink | final acc per seed | Δ points vs first (mean) | payload reduction (mean) |")
    print("|---|---|---|---|")
    for text in args.uplinks:
        finals, payloads = [], []
        for seed in args.seeds:
            accs, payload = run(json.loads(text), seed, args.rounds)
            base.setdefault(seed, (accs[-1], payload))
            finals.append(accs[-1])
            payloads.append(payload)
        pairs = list(zip(args.seeds, finals, payloads, strict=True))
        delta = statistics.fmean(100 * (f - base[s][0]) for s, f, _ in pairs)
        ratio = statistics.fmean(base[s][1] / p for s, _, p in pairs)
        print(f"| {text} | {' / '.join(f'{f:.3f}' for f in finals)} | {delta:+.1f} | "
              f"{ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
