"""Benchmark: samples/s through encoder + channel + decoder (issue 6).

A *sample* is one inference of the semantic multiplexer: K task inputs -> one block of
S x L channel symbols -> Sionna channel + AWGN + LMMSE -> K task predictions. Measured in
one run, on this machine's CPU threads:

* inference with a FRESH TR 38.901 CDL draw per sample (Sionna CDL + cir_to_ofdm_channel);
* inference with a fresh flat-fading (Rayleigh) draw per sample: the fast path;
* training steps (forward + backward + Adam) drawing blocks from a pre-drawn CDL bank, the
  way ``radio.train`` trains, and with fresh flat-fading draws.

It prints samples/s (best of repeated calls, robust to other load on a shared machine) and
the ratio of each CDL figure to the flat-fading fast path.

Usage::

    OMP_NUM_THREADS=2 python bench/radio.py [--threads 2] [--tasks 4] [--seconds 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

# This file is named like the `radio` package: drop bench/ from the import path (Python puts
# the script's folder first) and make sure the repository root is on it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))


def _rate(fn, batch: int, seconds: float, repeats: int = 5) -> float:
    """Samples/s of ``fn`` (``batch`` samples per call): best of ``repeats`` timed calls
    after a warm-up, the least disturbed by other load on a shared machine."""
    fn()
    fn()
    best = float("inf")
    t_end = time.perf_counter() + seconds
    n = 0
    while n < repeats or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        n += 1
    return batch / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--tasks", type=int, default=4, help="K tasks multiplexed")
    ap.add_argument("--batch", type=int, default=256, help="samples per call")
    ap.add_argument("--seconds", type=float, default=4.0, help="time per measurement [s]")
    ap.add_argument("--profile", default="C", help="CDL profile")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from radio.channel import MIMOChannel, snr_db_to_no
    from radio.config import DIGITS_TASKS
    from radio.runtime import resolve_runtime
    from radio.semantic import SemanticMuxSystem
    from radio.tasks import build_task
    from radio.train import TaskTensors, TrainConfig

    rt = resolve_runtime(0, "cpu")
    gen = rt.generator()
    tasks = [build_task(n) for n in DIGITS_TASKS[: args.tasks]]
    data = TaskTensors(tasks, rt.device, gen)
    b = args.batch
    cdl, flat = MIMOChannel("cdl", args.profile), MIMOChannel("flat")
    system = SemanticMuxSystem(
        [t.input_dim for t in tasks], [t.num_classes for t in tasks], 32, 128, 4, 8, True, cdl
    )
    no = snr_db_to_no(torch.full((b,), 10.0))
    xs, ys = data.train_batch(b, gen)
    system.eval()

    def infer(ch):
        def run():
            with torch.no_grad():
                system(xs, ch.generate(b, 1), no)
        return run

    bank = cdl.generate(2048, 1)
    opt = torch.optim.Adam(system.parameters(), lr=1e-3)
    ce = torch.nn.CrossEntropyLoss()
    cfg = TrainConfig(1, b, 1e-3, -5, 20)

    def train(source):
        def run():
            system.train()
            h = source()
            logits, extra = system(xs, h, no)
            loss = sum(ce(lg, y) for lg, y in zip(logits, ys, strict=True))
            loss = loss + cfg.vib_beta * extra["kl"].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return run

    def from_bank():
        i = torch.randint(0, bank.shape[0], (b,), generator=gen)
        return bank[i]

    res = {
        "infer_cdl_fresh": _rate(infer(cdl), b, args.seconds),
        "infer_flat_fresh": _rate(infer(flat), b, args.seconds),
        "train_cdl_bank": _rate(train(from_bank), b, args.seconds),
        "train_flat_fresh": _rate(train(lambda: flat.generate(b, 1)), b, args.seconds),
        "cdl_draws_only": _rate(lambda: cdl.generate(b, 1), b, args.seconds),
        "flat_draws_only": _rate(lambda: flat.generate(b, 1), b, args.seconds),
    }
    print(f"# bench/radio.py  {platform.processor() or platform.machine()}, "
          f"torch threads={torch.get_num_threads()}, K={args.tasks}, 4x4, L=8, batch={b}, "
          f"CDL-{args.profile} 28 GHz 120 kHz, load average {os.getloadavg()[0]:.1f}")
    print(f"{'measurement':28s} {'samples/s':>12s} {'ratio vs flat':>14s}")
    pairs = {"infer_cdl_fresh": "infer_flat_fresh", "train_cdl_bank": "train_flat_fresh",
             "cdl_draws_only": "flat_draws_only"}
    for k, v in res.items():
        ratio = f"{v / res[pairs[k]]:14.3f}" if k in pairs else f"{'1 (baseline)':>14s}"
        print(f"{k:28s} {v:12.0f} {ratio}")


if __name__ == "__main__":
    main()
