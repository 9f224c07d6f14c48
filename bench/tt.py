"""TT-Edge benchmarks (issue 5): prints ratios measured in one run, plus the MODELLED engine.

1. Our TT-SVD (torch; exact ``lapack`` per tensor, exact with equal shapes batched
   (``tt_svd_many``), ``randomized`` batched, and the exact ``gram`` back-end batched, the
   default) vs TensorLy
   ``tensor_train`` (numpy back-end, and the pytorch back-end as a second reference) on
   the same 32 ResNet-32 weights (conv as (Cin, kh, kw, Cout), fc as TT-matrix), same
   max ranks 4/8/16: whole-model time ratio (median of interleaved repeats) and
   reconstruction error of each; then randomized and gram vs exact SVD per unfolding shape
   and rank (where the crossover is).
2. two_phase (compiled, numba) and its torch reference vs lapack inside TT-SVD, per layer
   size, with the two_phase time split by phase (gebrd / orgbr / bdsqr), and the
   whole-model phase counters of the compiled version vs the reference.
3. MODELLED GEMM-only vs engine time/energy for compressing ResNet-32, from FLOPs per
   phase counted by two_phase; the paper's 1.7x / 40.2 % shown as reference only.
4. FL uplink codec on the digits CNN: bytes, error, encode/decode time and accuracy of the
   decoded model, for full weights and for a local update (delta after 20 local steps).

Weights: ResNet-32 trained ``--train-steps`` on sklearn digits upsampled to 3x32x32
(not CIFAR-10: none is downloaded), and its random (Kaiming) init for comparison.

Run: ``nice -n 15 .venv/bin/python bench/tt.py [--repeats 15] [--train-steps 150]
[--no-codec]``; the summary at the end prints both headline ratios of the run.
Timings are wall clock (and, for the TensorLy comparison, process CPU time too, which a
shared machine's load disturbs less) with 1 torch/BLAS thread; the load average is
printed beside them. Compare ratios from one run, not absolute seconds across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from nodes.compression.codec import decode_update, encode_update, encoded_nbytes  # noqa: E402
from nodes.compression.cost_model import (  # noqa: E402
    PAPER_REFERENCE,
    get_profile,
    modelled_cost,
)
from nodes.compression.data import load_digits_split  # noqa: E402
from nodes.compression.resnet import resnet32  # noqa: E402
from nodes.compression.svd import SvdStats  # noqa: E402
from nodes.compression.tensorize import plan_for  # noqa: E402
from nodes.compression.train import DigitsCNN, accuracy, train_steps  # noqa: E402
from nodes.compression.tt import relative_error, tt_svd, tt_svd_many  # noqa: E402

RANKS = (4, 8, 16)


def digits_resnet(steps: int, seed: int) -> tuple[nn.Module, float]:
    """ResNet-32 trained ``steps`` Adam steps (batch 32) on digits upsampled to (3, 32, 32).

    Returns the model and its test accuracy.
    """
    torch.manual_seed(seed)
    tr, te = load_digits_split(0.25, seed)

    def up(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=32, mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)

    tr.x, te.x = up(tr.x), up(te.x)
    model = resnet32()
    train_steps(model, tr, steps, 3e-3, 32, seed)
    model.eval()
    with torch.no_grad():
        acc = float((model(te.x).argmax(1) == te.y).float().mean())
    return model, acc


def weight_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The 32 ResNet-32 weights as TT-SVD inputs (float32)."""
    out = []
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d | nn.Linear):
            w = mod.weight.detach().float()
            out.append(plan_for(tuple(w.shape)).to_tensor(w).contiguous())
    return out


def model_error(refs: list[torch.Tensor], approx: list[torch.Tensor]) -> tuple[float, float]:
    """(whole-model relative Frobenius error, max per-layer relative error)."""
    num = den = 0.0
    worst = 0.0
    for r, a in zip(refs, approx, strict=True):
        e2 = float(torch.linalg.vector_norm(r - a.reshape(r.shape))) ** 2
        n2 = float(torch.linalg.vector_norm(r)) ** 2
        num, den = num + e2, den + n2
        worst = max(worst, (e2 / n2) ** 0.5)
    return (num / den) ** 0.5, worst


# our exact (lapack) TT-SVD per tensor; exact, equal shapes batched; randomized SVD,
# batched; exact Gram-matrix SVD, batched; TensorLy on numpy; on pytorch
METHODS = ("ours", "ours_batched", "ours_rand", "ours_gram", "tl_numpy", "tl_torch")
OURS = ("ours", "ours_batched", "ours_rand", "ours_gram")


def _decompose(
    method: str, tensors: list[torch.Tensor], arrays: list[np.ndarray], r: int
) -> list:
    """TT-decompose every weight with ``method`` at max rank ``r``; the TT objects."""
    import tensorly as tl
    from tensorly.decomposition import tensor_train

    if method == "ours":
        return [tt_svd(t, None, r, "lapack") for t in tensors]
    if method == "ours_batched":
        return tt_svd_many(tensors, r, "lapack")
    if method == "ours_rand":
        return tt_svd_many(tensors, r, "randomized")
    if method == "ours_gram":
        return tt_svd_many(tensors, r, "gram")
    if method == "tl_numpy":
        tl.set_backend("numpy")
        return [tensor_train(a, r) for a in arrays]
    tl.set_backend("pytorch")
    try:
        return [tensor_train(t, r) for t in tensors]
    finally:
        tl.set_backend("numpy")


def _reconstruct(
    method: str, tensors: list[torch.Tensor], arrays: list[np.ndarray], r: int
) -> list[torch.Tensor]:
    """The whole model decomposed with ``method`` and multiplied back to full tensors."""
    import tensorly as tl

    if method in OURS:
        return [tt.full() for tt in _decompose(method, tensors, arrays, r)]
    tts = _decompose(method, tensors, arrays, r)
    if method == "tl_numpy":
        return [torch.from_numpy(tl.tt_to_tensor(tt)) for tt in tts]
    tl.set_backend("pytorch")
    try:
        return [tl.tt_to_tensor(tt) for tt in tts]
    finally:
        tl.set_backend("numpy")


def _timed(
    method: str, tensors: list[torch.Tensor], arrays: list[np.ndarray], r: int
) -> tuple[float, float]:
    """Wall and process CPU seconds of one whole-model decomposition (no reconstruction)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    _decompose(method, tensors, arrays, r)
    return time.perf_counter() - t0, time.process_time() - c0


def vs_tensorly(tensors: list[torch.Tensor], repeats: int) -> list[dict]:
    """Whole-model TT-SVD time (median s) and error, ours vs TensorLy, per max rank."""
    arrays = [t.numpy() for t in tensors]
    rows = []
    for r in RANKS:
        times: dict[str, list[float]] = {k: [] for k in METHODS}
        cpu: dict[str, list[float]] = {k: [] for k in METHODS}
        for name in METHODS:
            _timed(name, tensors, arrays, r)  # warm-up
        for _ in range(repeats):
            for name in METHODS:  # interleaved so load changes hit all alike
                wall, cpu_s = _timed(name, tensors, arrays, r)
                times[name].append(wall)
                cpu[name].append(cpu_s)
        err = {k: model_error(tensors, _reconstruct(k, tensors, arrays, r)) for k in METHODS}
        rows.append(_tensorly_row(r, times, cpu, err))
    return rows


def _tensorly_row(
    r: int,
    times: dict[str, list[float]],
    cpu: dict[str, list[float]],
    err: dict[str, tuple[float, float]],
) -> dict:
    """One rank's row: median times, time ratios (wall, best, CPU) and errors."""
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "max_rank": r, "ours_s": med["ours"], "tensorly_numpy_s": med["tl_numpy"],
        "tensorly_torch_s": med["tl_torch"], "ours_rand_s": med["ours_rand"],
        "ours_batched_s": med["ours_batched"], "ours_gram_s": med["ours_gram"],
        "gram_ratio_vs_tensorly_numpy": med["ours_gram"] / med["tl_numpy"],
        "gram_cpu_ratio_vs_tensorly_numpy": cpu_med["ours_gram"] / cpu_med["tl_numpy"],
        "batched_ratio_vs_tensorly_numpy": med["ours_batched"] / med["tl_numpy"],
        "ratio_vs_tensorly_numpy": med["ours"] / med["tl_numpy"],
        "rand_ratio_vs_tensorly_numpy": med["ours_rand"] / med["tl_numpy"],
        "rand_cpu_ratio_vs_tensorly_numpy": cpu_med["ours_rand"] / cpu_med["tl_numpy"],
        "ratio_vs_tensorly_torch": med["ours"] / med["tl_torch"],
        "ratio_vs_tensorly_numpy_min": best["ours"] / best["tl_numpy"],
        "cpu_ratio_vs_tensorly_numpy": cpu_med["ours"] / cpu_med["tl_numpy"],
        "cpu_ratio_vs_tensorly_torch": cpu_med["ours"] / cpu_med["tl_torch"],
        "ours_err": err["ours"][0], "ours_rand_err": err["ours_rand"][0],
        "ours_batched_err": err["ours_batched"][0], "ours_gram_err": err["ours_gram"][0],
        "gram_max_layer_err": err["ours_gram"][1],
        "tensorly_numpy_err": err["tl_numpy"][0],
        "tensorly_torch_err": err["tl_torch"][0],
        "ours_max_layer_err": err["ours"][1], "tensorly_max_layer_err": err["tl_numpy"][1],
    }


def _min_times(fns: list[Callable[[], object]], repeats: int) -> list[tuple[float, float]]:
    """(min wall s, min process CPU s) of each of ``fns`` over ``repeats`` interleaved rounds
    (so load changes hit all alike)."""
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            walls[i].append(time.perf_counter() - t0)
            cpus[i].append(time.process_time() - c0)
    return [(min(w), min(c)) for w, c in zip(walls, cpus, strict=True)]


def _layer_tensors(model: nn.Module) -> dict[tuple[int, ...], torch.Tensor]:
    """One TT-SVD input per distinct Conv2d/Linear weight shape."""
    seen: dict[tuple[int, ...], torch.Tensor] = {}
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d | nn.Linear):
            w = mod.weight.detach().float()
            seen.setdefault(tuple(w.shape), plan_for(tuple(w.shape)).to_tensor(w).contiguous())
    return seen


def backends_per_size(model: nn.Module, rank: int, repeats: int) -> list[dict]:
    """two_phase (compiled) and its torch reference vs lapack TT-SVD time per distinct
    layer shape, with the compiled two_phase's phase shares."""
    tt_svd(torch.randn(8, 3, 8), None, rank, "two_phase")  # numba: load/compile first
    rows = []
    for shape, t in _layer_tensors(model).items():
        stats = SvdStats()  # accumulated over all repeats: phase shares from all of them
        lap, two = _min_times([lambda t=t: tt_svd(t, None, rank, "lapack"),
                               lambda t=t, st=stats: tt_svd(t, None, rank, "two_phase", st)],
                              repeats)
        ref = _min_times([lambda t=t: tt_svd(t, None, rank, "two_phase_reference")], 1)[0]
        last = SvdStats()
        tt_svd(t, None, rank, "two_phase", last)
        total = sum(stats.phases[p].seconds for p in ("gebrd", "orgbr", "bdsqr"))
        rows.append({
            "weight_shape": list(shape), "tensor_shape": list(t.shape),
            "svd_shapes": [list(s) for s in last.shapes],
            "lapack_s": lap[0], "two_phase_s": two[0], "reference_s": ref[0],
            "ratio_two_phase_over_lapack": two[0] / lap[0],
            "cpu_ratio_two_phase_over_lapack": two[1] / lap[1],
            "ratio_reference_over_lapack": ref[0] / lap[0],
            **{f"{p}_pct": 100 * stats.phases[p].seconds / total
               for p in ("gebrd", "orgbr", "bdsqr")},
            **{f"{p}_flops": last.phases[p].flops for p in ("gebrd", "orgbr", "bdsqr")},
            "bdsqr_sweeps": last.sweeps,
        })
    return rows


def counters_vs_reference(tensors: list[torch.Tensor], r: int) -> dict:
    """Whole-model phase counters of the compiled two_phase vs its torch reference."""
    out: dict = {"max_rank": r}
    for backend in ("two_phase", "two_phase_reference"):
        st = SvdStats()
        for t in tensors:
            tt_svd(t, None, r, backend, st)
        for name in ("gebrd", "orgbr", "bdsqr"):
            out[f"{backend}_{name}_flops"] = st.phases[name].flops
        out[f"{backend}_sweeps"] = st.sweeps
    out["bdsqr_flops_rel_diff"] = (out["two_phase_bdsqr_flops"]
                                   / out["two_phase_reference_bdsqr_flops"] - 1.0)
    return out


CROSSOVER_SHAPES = ((64, 576), (48, 192), (32, 288), (48, 64), (16, 144))


def randomized_crossover(tensors: list[torch.Tensor], repeats: int) -> list[dict]:
    """Randomized (forced, whatever the rank) and gram vs exact SVD per unfolding shape and
    rank: time and relative error of the rank-r truncation, on unfoldings of trained
    weights."""
    import nodes.compression.svd as svdmod

    by_shape: dict[tuple[int, int], torch.Tensor] = {}
    for t in tensors:
        mat = t.reshape(t.shape[0], -1)
        by_shape.setdefault((int(mat.shape[0]), int(mat.shape[1])), mat)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for shape in CROSSOVER_SHAPES:
        a = by_shape.get(shape, torch.randn(*shape, generator=gen))
        for r in RANKS:
            if r + svdmod.OVERSAMPLE > min(shape):
                continue
            chosen = svdmod.randomized_applies(shape, r)
            saved, svdmod.CROSSOVER = svdmod.CROSSOVER, 1.0
            try:
                rand, exact, gram = _min_times(
                    [lambda a=a, r=r: svdmod.svd_randomized(a, None, r),
                     lambda a=a: svdmod.svd_lapack(a),
                     lambda a=a, r=r: svdmod.svd_gram(a, None, r)], repeats)
                ur, sr, vr = svdmod.svd_randomized(a, None, r)
            finally:
                svdmod.CROSSOVER = saved
            ue, se, ve = svdmod.svd_lapack(a)
            ug, sg, vg = svdmod.svd_gram(a, None, r)
            rows.append({
                "shape": list(shape), "rank": r, "from_weights": shape in by_shape,
                "exact_s": exact[0], "randomized_s": rand[0],
                "time_ratio": rand[0] / exact[0], "used_by_randomized_backend": chosen,
                "gram_s": gram[0], "gram_time_ratio": gram[0] / exact[0],
                "exact_err": float(relative_error(a, (ue[:, :r] * se[:r]) @ ve[:r])),
                "randomized_err": float(relative_error(a, (ur[:, :r] * sr[:r]) @ vr[:r])),
                "gram_err": float(relative_error(a, (ug * sg) @ vg)),
            })
    return rows


def engine_model(tensors: list[torch.Tensor]) -> list[dict]:
    """MODELLED engine vs GEMM-only for the whole ResNet-32 at each max rank."""
    prof = get_profile("riscv-edge-ttd")
    rows = []
    for r in RANKS:
        st = SvdStats()
        t0 = time.perf_counter()
        for t in tensors:
            tt_svd(t, None, r, "two_phase", st)
        measured = time.perf_counter() - t0
        ph = st.by_paper_phase()
        bi, di = ph["bidiagonalization"].flops, ph["diagonalization"].flops
        cost = modelled_cost(bi, di, prof)
        # Baseline diag throughput that would make this model give the paper's 1.7x.
        target = PAPER_REFERENCE["speedup_x"] * cost["engine_s"] - cost["gemm_only_bidiag_s"]
        calib = di / target / 1e9 if target > 0 else float("nan")
        rows.append({"max_rank": r, **{k: v for k, v in cost.items() if k != "profile"},
                     "two_phase_measured_here_s": measured,
                     "baseline_diag_gflops_for_paper_1.7x": calib})
    return rows


def codec_table(seed: int) -> list[dict]:
    """Codec on a trained digits CNN: full weights and a 20-step local update."""
    torch.manual_seed(seed)
    tr, te = load_digits_split(0.25, seed)
    model = DigitsCNN()
    train_steps(model, tr, 600, 3e-3, 64, seed)
    w0 = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    acc_w0 = accuracy(model, te)  # before the local update: what dropping it entirely gives
    train_steps(model, tr, 20, 1e-3, 64, seed + 1)
    w1 = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    delta = {k: w1[k] - w0[k] if np.issubdtype(w1[k].dtype, np.floating) else w1[k]
             for k in w1}
    acc_full = accuracy(model, te)
    rows = []
    for what, arrays in (("weights", w1), ("update", delta)):
        raw = sum(a.nbytes for a in arrays.values())
        for eps in (0.1, 0.3, 0.5, 0.7, 0.9):
            t0 = time.perf_counter()
            enc = encode_update(arrays, eps, None, 1024)
            t1 = time.perf_counter()
            dec = decode_update(enc)
            t2 = time.perf_counter()
            errs = [float(np.linalg.norm(dec[k] - a) / np.linalg.norm(a))
                    for k, a in arrays.items() if f"{k}@tt/core0" in enc]
            rebuilt = dec if what == "weights" else {
                k: (w0[k] + dec[k]) if np.issubdtype(w0[k].dtype, np.floating) else dec[k]
                for k in dec}
            probe = DigitsCNN()
            probe.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in rebuilt.items()})
            rows.append({
                "payload": what, "eps": eps, "raw_bytes": raw,
                "encoded_bytes": encoded_nbytes(enc), "ratio": raw / encoded_nbytes(enc),
                "tensors_tt": len(errs), "max_rel_err": max(errs, default=0.0),
                "encode_ms": 1e3 * (t1 - t0), "decode_ms": 1e3 * (t2 - t1),
                "acc_decoded": accuracy(probe, te), "acc_uncompressed": acc_full,
                "acc_without_update": acc_w0,
            })
    return rows


def md_table(rows: list[dict], cols: list[str], fmt: str = "{:.4g}") -> str:
    """Markdown table of ``cols``."""
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(
            fmt.format(r[c]) if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(out)


def _tensorly_section(result: dict, models: dict[str, nn.Module], repeats: int) -> None:
    """Section 1: ours (exact and randomized) vs TensorLy, per weights and rank."""
    for label, model in models.items():
        rows = vs_tensorly(weight_tensors(model), repeats)
        result[f"tensorly_{label}"] = rows
        print(f"\n## Ours vs TensorLy tensor_train, ResNet-32 {label} weights "
              f"(median of {repeats})")
        print(md_table(rows, ["max_rank", "ours_s", "ours_batched_s", "ours_rand_s",
                              "ours_gram_s", "tensorly_numpy_s", "tensorly_torch_s",
                              "ratio_vs_tensorly_numpy", "batched_ratio_vs_tensorly_numpy",
                              "rand_ratio_vs_tensorly_numpy", "gram_ratio_vs_tensorly_numpy",
                              "gram_cpu_ratio_vs_tensorly_numpy",
                              "cpu_ratio_vs_tensorly_numpy", "ratio_vs_tensorly_torch",
                              "ours_err", "ours_batched_err", "ours_rand_err", "ours_gram_err",
                              "tensorly_numpy_err", "tensorly_torch_err"]))
    rows = randomized_crossover(weight_tensors(models["trained"]), repeats)
    result["randomized_crossover"] = rows
    print("\n## Randomized (HMT, p=8, q=2) and gram vs exact SVD per unfolding (min of "
          f"{repeats}); used_by_randomized_backend = below the crossover")
    print(md_table(rows, ["shape", "rank", "from_weights", "exact_s", "randomized_s",
                          "time_ratio", "used_by_randomized_backend", "gram_s",
                          "gram_time_ratio", "exact_err", "randomized_err", "gram_err"]))


def _two_phase_section(result: dict, trained: nn.Module, repeats: int) -> None:
    """Section 2: compiled two_phase and its reference vs lapack; counters vs reference."""
    rows = backends_per_size(trained, 16, repeats)
    result["backends"] = rows
    print("\n## two_phase (compiled) vs lapack TT-SVD per layer shape (max rank 16, trained "
          f"weights, min of {repeats}; torch reference: 1 run)")
    print(md_table(rows, ["weight_shape", "lapack_s", "two_phase_s", "reference_s",
                          "ratio_two_phase_over_lapack", "cpu_ratio_two_phase_over_lapack",
                          "ratio_reference_over_lapack", "gebrd_pct", "orgbr_pct",
                          "bdsqr_pct", "bdsqr_sweeps"]))
    rows = [counters_vs_reference(weight_tensors(trained), r) for r in RANKS]
    result["counters_vs_reference"] = rows
    print("\n## Whole-model phase counters: compiled two_phase vs torch reference")
    print(md_table(rows, ["max_rank", "two_phase_gebrd_flops", "two_phase_reference_gebrd_flops",
                          "two_phase_orgbr_flops", "two_phase_reference_orgbr_flops",
                          "two_phase_bdsqr_flops", "two_phase_reference_bdsqr_flops",
                          "bdsqr_flops_rel_diff", "two_phase_sweeps",
                          "two_phase_reference_sweeps"]))


def _summary(result: dict) -> None:
    """The two headline ratios of this run."""
    print("\n## Summary (this run)")
    for label in ("trained", "random-init"):
        for row in result[f"tensorly_{label}"]:
            print(f"TT-SVD / TensorLy numpy, {label}, rank {row['max_rank']}: gram+batched "
                  f"(exact, default) {row['gram_ratio_vs_tensorly_numpy']:.2f}x time (error "
                  f"{row['ours_gram_err']:.4f}), randomized+batched "
                  f"{row['rand_ratio_vs_tensorly_numpy']:.2f}x (error "
                  f"{row['ours_rand_err']:.4f}), lapack batched "
                  f"{row['batched_ratio_vs_tensorly_numpy']:.2f}x (error "
                  f"{row['ours_batched_err']:.4f}); TensorLy error "
                  f"{row['tensorly_numpy_err']:.4f}")
    two = [r["ratio_two_phase_over_lapack"] for r in result["backends"]]
    print(f"two_phase / lapack per layer shape: {min(two):.2f}-{max(two):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--train-steps", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-codec", action="store_true", help="skip sections 3-4")
    ap.add_argument("--out", type=str, default=None, help="write all rows as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    trained, acc = digits_resnet(args.train_steps, args.seed)
    torch.manual_seed(args.seed)
    rand = resnet32()
    print(f"# TT-Edge bench (measured here, torch {torch.__version__}, threads={args.threads})")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load average at start: "
          f"{os.getloadavg()}")
    print(f"ResNet-32 trained {args.train_steps} steps on digits upsampled to 3x32x32: "
          f"test acc {acc:.3f}")
    result: dict = {"train_steps": args.train_steps, "digits_resnet_acc": acc,
                    "load_start": os.getloadavg()}
    _tensorly_section(result, {"trained": trained, "random-init": rand}, args.repeats)
    _two_phase_section(result, trained, max(5, args.repeats // 3))
    if not args.no_codec:
        _model_and_codec_sections(result, trained, args.seed)
    _summary(result)
    print(f"\nbench wall time {time.perf_counter() - t0:.1f} s; "
          f"load average at end: {os.getloadavg()}")
    result["load_end"] = os.getloadavg()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2, default=float)


def _model_and_codec_sections(result: dict, trained: nn.Module, seed: int) -> None:
    """Sections 3 (MODELLED engine) and 4 (FL uplink codec)."""
    rows = engine_model(weight_tensors(trained))
    result["engine_modelled"] = rows
    print("\n## MODELLED (not measured): GEMM-only vs TTD engine, ResNet-32 TT-SVD, "
          "profile riscv-edge-ttd (assumed parameters)")
    print(md_table(rows, ["max_rank", "bidiag_flops", "diag_flops", "gemm_only_s", "engine_s",
                          "speedup_x", "energy_saving_pct",
                          "baseline_diag_gflops_for_paper_1.7x"]))
    print(f"Paper reference (not our result): {PAPER_REFERENCE}")
    rows = codec_table(seed)
    result["codec"] = rows
    print("\n## FL uplink codec, digits CNN (measured)")
    print(md_table(rows, ["payload", "eps", "raw_bytes", "encoded_bytes", "ratio", "tensors_tt",
                          "max_rel_err", "encode_ms", "decode_ms", "acc_decoded",
                          "acc_uncompressed", "acc_without_update"]))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
