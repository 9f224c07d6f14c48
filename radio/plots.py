"""Plots of the semantic-multiplexing experiment (matplotlib, Agg backend, PNG).

Each figure states in its title whether its quantities are measured or modelled.
"""

from __future__ import annotations

import pathlib

__all__ = ["plot_all"]

_STYLE = {"semantic_mux": ("tab:blue", "o"), "joint_encoder": ("tab:purple", "D"),
          "orthogonal_equal": ("tab:red", "v"), "orthogonal": ("tab:orange", "s"),
          "bit_level": ("tab:green", "^")}
_OTHER = ("tab:gray", "x")


def _styles(spec) -> list[tuple[str, tuple[str, str]]]:
    """(scheme, (colour, marker)) for every scheme of the run."""
    return [(sc, _STYLE.get(sc, _OTHER)) for sc in spec.schemes]


def _select(rows, name, **kw):
    return [r for r in rows if r["name"] == name and all(r.get(k) == v for k, v in kw.items())]


def _series(rows, name, xs, x_key, **kw) -> tuple[list[float], list[float]]:
    """Means and std (0 where there is none) of ``name`` at each ``x_key`` in ``xs``."""
    found = [_select(rows, name, **{x_key: x}, **kw)[0] for x in xs]
    return [r["value"] for r in found], [r.get("std") or 0.0 for r in found]


def plot_all(rows: list[dict], spec, tasks, out_dir: pathlib.Path) -> list[str]:
    """Write accuracy_vs_k.png, accuracy_vs_snr.png, load_latency_vs_k.png.

    Parameters
    ----------
    rows : list of dict
        Aggregate metric rows of :func:`radio.experiment.run_semantic_mux` (means over
        the seeds; error bars are the sample std where there is more than one seed).
    spec : SemanticMuxSpec
    tasks : list of TaskData
    out_dir : pathlib.Path

    Returns
    -------
    list of str
        File names written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = list(spec.num_tasks_list)
    snrs = list(spec.snr_db_list)
    snr_ref = min(snrs, key=lambda s: abs(s - 10.0))
    channel = f"{spec.num_tx_antennas}x{spec.num_rx_antennas} {spec.channel_model.upper()}"
    if spec.channel_model != "flat":
        channel += f"-{spec.channel_profile}"
    channel += f", {spec.carrier_frequency_hz / 1e9:g} GHz"
    files = []

    # 1. accuracy vs K at the SNR closest to 10 dB
    fig, ax = plt.subplots(figsize=(6, 4))
    for sc, (c, mk) in _styles(spec):
        mean, e_mean = _series(rows, "mean_accuracy", ks, "num_tasks", scheme=sc,
                               snr_db=snr_ref)
        first, e_first = _series(rows, "accuracy", ks, "num_tasks", scheme=sc, snr_db=snr_ref,
                                 task=tasks[0].name)
        ax.errorbar(ks, mean, e_mean, color=c, marker=mk, capsize=2,
                    label=f"{sc}: mean over tasks")
        ax.errorbar(ks, first, e_first, color=c, marker=mk, ls="--", capsize=2,
                    label=f"{sc}: task '{tasks[0].name}'")
    ax.set_xlabel("number of tasks K")
    ax.set_ylabel("test accuracy")
    ax.set_xticks(ks)
    ax.set_title(f"Accuracy vs K (measured, simulated {channel}, SNR {snr_ref:g} dB;\n"
                 "mean +- std over training seeds)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "accuracy_vs_k.png", dpi=120)
    plt.close(fig)
    files.append("accuracy_vs_k.png")

    # 2. accuracy vs SNR, largest K solid, smallest K dashed
    fig, ax = plt.subplots(figsize=(6, 4))
    for sc, (c, mk) in _styles(spec):
        for k, ls in ((max(ks), "-"), (min(ks), ":")):
            acc, err = _series(rows, "mean_accuracy", snrs, "snr_db", scheme=sc, num_tasks=k)
            ax.errorbar(snrs, acc, err, color=c, marker=mk, ls=ls, capsize=2,
                        label=f"{sc}, K={k}")
    ax.set_xlabel("SNR per receive antenna [dB]")
    ax.set_ylabel("mean test accuracy over tasks")
    ax.set_title(f"Accuracy vs SNR (measured, simulated {channel};\n"
                 "mean +- std over training seeds)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "accuracy_vs_snr.png", dpi=120)
    plt.close(fig)
    files.append("accuracy_vs_snr.png")

    # 3. load and latency vs K
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    panels = (("communication_load_symbols", "complex symbols / inference", "load (measured)"),
              ("latency_s", "latency [ms]", "latency = compute + airtime (modelled)"),
              ("energy_j", "energy [mJ]", "energy (modelled)"))
    for ax, (name, ylabel, title) in zip(axes, panels, strict=True):
        scale = 1e3 if name in ("latency_s", "energy_j") else 1.0
        for sc, (c, mk) in _styles(spec):
            v = [_select(rows, name, scheme=sc, num_tasks=k)[0]["value"] * scale for k in ks]
            ax.plot(ks, v, color=c, marker=mk, label=sc)
        ax.set_yscale("log")
        ax.set_xticks(ks)
        ax.set_xlabel("number of tasks K")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Load, latency and energy vs K ({channel})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_dir / "load_latency_vs_k.png", dpi=120)
    plt.close(fig)
    files.append("load_latency_vs_k.png")
    return files
