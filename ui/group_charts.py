"""Figures of a large fleet by group (pure functions: controller data in, figure out).

The controller sends a fleet of more than ``grouped_above`` nodes by group (``grouped``:
nodes per tier/profile with how many are in each state; only the nodes that failed or
were faulted one by one). ``group_dot`` draws one box per group in its tier's layer,
``group_table`` gives a row per group, ``round_table`` the nodes sampled per round.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ui.charts import LINK_STYLES, NODE_COLOURS, link_label, node_table

#: States that count as trouble (a group with any is outlined in red).
TROUBLE = ("down", "straggling", "misconfigured")


def states_text(states: dict[str, int], sep: str = " · ") -> str:
    """``199,998 up · 2 down``: counts per state, the largest first."""
    return sep.join(f"{k:,} {s}" for s, k in sorted(states.items(), key=lambda x: -x[1]))


def _main(states: dict[str, int], fallback: str) -> str:
    return max(states, key=lambda s: states[s]) if states else fallback


def group_dot(fleet: dict[str, Any]) -> str:
    """Graphviz DOT of a grouped fleet: tiers as layers, a box per group (filled by the
    state most of its nodes are in, outlined red when any is down, straggling or
    misconfigured), an edge from the server's group to each group with links,
    labelled with its link and how many links are in another state."""
    lines = [
        "digraph continuum {",
        '  graph [rankdir=TB, ranksep=0.9, nodesep=0.35, fontname="Helvetica", bgcolor=none];',
        '  node [shape=box3d, style="rounded,filled", fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9, dir=none];',
    ]
    ids = {id(g): f"group-{i}" for i, g in enumerate(fleet["groups"])}
    for tier in fleet["tiers"]:
        lines.append(f'  subgraph "cluster_{tier}" {{')
        lines.append(f'    label="{tier}"; style="rounded,dashed"; color="#8c959f"; rank=same;')
        for g in (g for g in fleet["groups"] if g["tier"] == tier):
            colour = NODE_COLOURS.get(_main(g["states"], "planned"), "#ffffff")
            trouble = any(g["states"].get(s) for s in TROUBLE)
            outline = ', color="#cf222e", penwidth=3' if trouble else ""
            role = " (server)" if g["role"] == "server" else ""
            count = f"{g['nodes']:,} node" + ("s" if g["nodes"] != 1 else "")
            label = f"{g['group']}{role}\\n{count}\\n{states_text(g['states'])}"
            hosts = " + ".join(g.get("workloads") or [])
            label += f"\\n[{hosts}]" if hosts else ""
            lines.append(f'    "{ids[id(g)]}" [label="{label}", fillcolor="{colour}"{outline}];')
        lines.append("  }")
    server = next((g for g in fleet["groups"] if g["role"] == "server"), None)
    layer = {t: i for i, t in enumerate(fleet["tiers"])}
    for g in fleet["groups"]:
        if server is None or not g.get("link"):
            continue
        main = _main(g["link_states"], "ok")
        colour, style = LINK_STYLES.get(main, LINK_STYLES["ok"])
        label = link_label({**g["link"], "state": None})
        if g.get("own_links"):
            label += f"\\n+{g['own_links']:,} with own links"
        others = {s: k for s, k in g["link_states"].items() if s != main}
        if others:
            label += f"\\n{states_text(others)}"
        a, b = ids[id(server)], ids[id(g)]
        if layer.get(g["tier"], 0) < layer.get(server["tier"], 0):
            a, b = b, a  # edges point down the layers, so tiers stack in order
        lines.append(
            f'  "{a}" -> "{b}" [label="{label}", color="{colour}",'
            f' fontcolor="{colour}", style={style}];'
        )
    lines.append("}")
    return "\n".join(lines)


def _mb(nbytes: float | None) -> float | None:
    return None if nbytes is None else float(f"{nbytes / 1e6:.3g}")


def group_table(fleet: dict[str, Any]) -> pd.DataFrame:
    """One row per group: tier/profile, role, nodes, nodes per state, profile figures,
    its link (and how many nodes have another), bytes moved, largest peak memory."""
    rows = []
    for g in fleet["groups"]:
        link = g.get("link")
        rows.append(
            {
                "tier/profile": g["group"],
                "role": g["role"],
                "nodes": g["nodes"],
                "states": states_text(g["states"], ", "),
                "workloads": " + ".join(g.get("workloads") or []) or "-",
                "CPU cores": g["cpu_cores"],
                "CPU speed (x host)": g["cpu_speed_factor"],
                "memory MB": g["memory_mb"],
                "accelerator": g.get("accelerator") or "-",
                "link": link_label({**link, "state": None}).replace("\\n", " ") if link else "-",
                "own links": g.get("own_links") or 0,
                "links": states_text(g.get("link_states") or {}, ", ") or "-",
                "MB up": _mb(g.get("bytes_up")),
                "MB down": _mb(g.get("bytes_down")),
                "max peak RSS MB": round(g["peak_rss_mb"]) if g.get("peak_rss_mb") else None,
            }
        )
    return pd.DataFrame(rows)


def round_table(fleet: dict[str, Any]) -> pd.DataFrame:
    """Per round: nodes sampled, completed, failed, other, not sampled."""
    cols = ["round", "sampled", "completed", "failed", "other", "not_sampled"]
    df = pd.DataFrame(fleet.get("round_counts") or [], columns=cols)
    return df.rename(columns={"not_sampled": "not sampled"})


def listed_table(fleet: dict[str, Any]) -> pd.DataFrame:
    """The nodes listed one by one (failed or faulted): :func:`ui.charts.node_table`
    plus the fault injected into each and the rounds it failed."""
    df = node_table(fleet)
    if df.empty:
        return df
    df.insert(3, "fault", [(n.get("fault") or {}).get("kind", "-") for n in fleet["nodes"]])
    failed = [", ".join(map(str, n.get("failed_rounds") or [])) or "-" for n in fleet["nodes"]]
    df.insert(4, "failed rounds", failed)
    return df
