"""Chaos page sections: inject a fault into a running run now, and what was injected.

The kinds offered are those the controller lists (``GET /faults``, from the spec's
``FaultSpec``); each kind shows the parameters it uses, when the controller knows them.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from ui import client

KIND_LABELS = {
    "crash": "crash (node killed, never returns)",
    "outage": "outage (node down for a while, then rejoins)",
    "flapping": "flapping (repeated outages)",
    "partition": "partition (link blackholed for a while)",
    "straggler": "straggler (node computes slower)",
    "misconfig": "misconfig (bad learning rate, flipped labels, noise, NaN)",
    "degrade": "degrade link (bandwidth / latency / loss)",
    "superlink-restart": "SuperLink restart",
}
KIND_PARAMS = {
    "crash": [],
    "outage": ["duration_s"],
    "flapping": ["duration_s", "repeat"],
    "partition": ["duration_s"],
    "straggler": ["factor", "rounds"],
    "misconfig": ["mode", "factor", "rounds"],
    "degrade": ["bandwidth_mbps", "latency_ms", "loss_pct", "duration_s"],
    "superlink-restart": [],
}
DEFAULTS: dict[str, Any] = {
    "duration_s": 10.0,
    "repeat": 3,
    "factor": 3.0,
    "rounds": 2,
    "bandwidth_mbps": 5.0,
    "latency_ms": 200.0,
    "loss_pct": 1.0,
}


def _json_type(schema: dict[str, Any]) -> tuple[str, list[Any] | None]:
    """(``number`` | ``integer`` | ``enum`` | other, enum values) of a field schema."""
    options = schema.get("anyOf", [schema])
    for o in options:
        if "enum" in o:
            return "enum", list(o["enum"])
        if o.get("type") in ("number", "integer"):
            return o["type"], None
    return "other", None


def _param_input(name: str, field: dict[str, Any]) -> Any:
    kind, values = _json_type(field["schema"])
    label = f"{name} — {field['description']}" if field["description"] else name
    if kind == "enum" and values:
        return st.selectbox(label, values, key=f"fault-{name}")
    if kind == "integer":
        return int(
            st.number_input(
                label, min_value=1, value=int(DEFAULTS.get(name, 1)), key=f"fault-{name}"
            )
        )
    return float(
        st.number_input(
            label, min_value=0.0, value=float(DEFAULTS.get(name, 1.0)), key=f"fault-{name}"
        )
    )


def fault_form(run_id: str, fleet: dict[str, Any]) -> None:
    """Kind, target (a client node or a whole tier), the kind's parameters; Inject now."""
    schema = client.fault_schema()
    kinds = schema["kinds"]
    kind = st.selectbox(
        "Fault", kinds, key="fault-kind", format_func=lambda k: KIND_LABELS.get(k, k)
    )
    fault: dict[str, Any] = {"kind": kind}
    if kind != "superlink-restart":
        clients = [n["name"] for n in fleet["nodes"] if n["role"] == "client"]
        tiers = sorted({n["tier"] for n in fleet["nodes"] if n["role"] == "client"})
        targets = clients + [f"tier: {t}" for t in tiers]
        target = st.selectbox("Target", targets, key="fault-target")
        if target.startswith("tier: "):
            fault["tier"] = target.removeprefix("tier: ")
        else:
            fault["node"] = target
    for name in KIND_PARAMS.get(kind, []):
        if name in schema["fields"]:
            fault[name] = _param_input(name, schema["fields"][name])
    if st.button("Inject now", type="primary", icon=":material/bolt:"):
        t0 = time.time()
        try:
            out = client.inject(run_id, fault)
        except client.ControllerError as e:
            st.error(e.message)
            for p in e.problems:
                st.markdown(f"- `{p['path']}` — {p['message']}")
            return
        took = time.time() - t0
        msg = f"injection {out['injection_id']}: {out['status']} ({took:.1f} s)"
        (st.success if out["status"] == "applied" else st.warning)(msg)


def history(run_id: str) -> None:
    """Live injections into the run and whether its chaos engine applied them."""
    rows = client.injections(run_id)
    if not rows:
        st.caption("nothing injected into this run yet")
        return
    st.dataframe(
        [
            {
                "id": r["id"],
                "at": time.strftime("%H:%M:%S", time.localtime(r["ts"])),
                "kind": r["spec"].get("kind"),
                "target": r["spec"].get("node") or f"tier {r['spec'].get('tier')}",
                "status": r["status"],
            }
            for r in rows
        ],
        hide_index=True,
    )
