"""Plots of the semantic-multiplexing experiment (matplotlib, Agg backend, PNG).

Each figure states in its title whether its quantities are measured or modelled.
"""

from __future__ import annotations

import pathlib

__all__ = ["plot_all"]

_STYLE = {"semantic_mux": ("tab:blue", "o"), "orthogonal": ("tab:orange", "s"),
          "bit_level": ("tab:green", "^")}


def _select(rows, name, **kw):
    return [r for r in rows if r["name"] == name and all(r.get(k) == v for k, v in kw.items())]


def plot_all(rows: list[dict], spec, tasks, out_dir: pathlib.Path) -> list[str]:
    """Write accuracy_vs_k.png, accuracy_vs_snr.png, load_latency_vs_k.png.

    Parameters
    ----------
    rows : list of dict
        Metric rows of :func:`radio.experiment.run_semantic_mux`.
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
    for sc, (c, mk) in _STYLE.items():
        mean = [_select(rows, "mean_accuracy", scheme=sc, num_tasks=k, snr_db=snr_ref)[0]["value"]
                for k in ks]
        first = [_select(rows, "accuracy", scheme=sc, num_tasks=k, snr_db=snr_ref,
                         task=tasks[0].name)[0]["value"] for k in ks]
        ax.plot(ks, mean, color=c, marker=mk, label=f"{sc}: mean over tasks")
        ax.plot(ks, first, color=c, marker=mk, ls="--", label=f"{sc}: task '{tasks[0].name}'")
    ax.set_xlabel("number of tasks K")
    ax.set_ylabel("test accuracy")
    ax.set_xticks(ks)
    ax.set_title(f"Accuracy vs K (measured, simulated {channel}, SNR {snr_ref:g} dB)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "accuracy_vs_k.png", dpi=120)
    plt.close(fig)
    files.append("accuracy_vs_k.png")

    # 2. accuracy vs SNR, largest K solid, smallest K dashed
    fig, ax = plt.subplots(figsize=(6, 4))
    for sc, (c, mk) in _STYLE.items():
        for k, ls in ((max(ks), "-"), (min(ks), ":")):
            acc = [_select(rows, "mean_accuracy", scheme=sc, num_tasks=k, snr_db=s)[0]["value"]
                   for s in snrs]
            ax.plot(snrs, acc, color=c, marker=mk, ls=ls, label=f"{sc}, K={k}")
    ax.set_xlabel("SNR per receive antenna [dB]")
    ax.set_ylabel("mean test accuracy over tasks")
    ax.set_title(f"Accuracy vs SNR (measured, simulated {channel})", fontsize=9)
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
        for sc, (c, mk) in _STYLE.items():
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
