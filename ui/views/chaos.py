"""Chaos page sections: inject a fault into a running run now, and what was injected.

The kinds offered, their labels and their parameters are those the controller lists
(``GET /faults``, from the fault-kind registry ``testbed.faults``): a kind registered
there appears here without a change to this page.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from ui import client

DEFAULTS: dict[str, Any] = {  # first values offered for common parameters
    "duration_s": 10.0,
    "repeat": 3,
    "factor": 3.0,
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


def _param_input(name: str, field: dict[str, Any], required: bool) -> Any:
    """An input for one parameter; an optional number starts empty (not set)."""
    kind, values = _json_type(field)
    desc = field.get("description", "")
    label = f"{name} — {desc}" if desc else name
    if kind == "enum" and values:
        return st.selectbox(label, values, key=f"fault-{name}")
    start = field.get("default", DEFAULTS.get(name, 1)) if required or name in DEFAULTS else None
    if kind == "integer":
        v = st.number_input(label, min_value=1, value=start, step=1, key=f"fault-{name}")
        return None if v is None else int(v)
    v = st.number_input(
        label, min_value=0.0, value=None if start is None else float(start), key=f"fault-{name}"
    )
    return None if v is None else float(v)


#: The target option of a large fleet's form that asks for a node's name.
BY_NAME = "a node, by name"


def fault_form(run_id: str, fleet: dict[str, Any]) -> None:
    """Kind, target (a client node or a whole tier), the kind's parameters; Inject now."""
    schema = client.fault_schema()
    details = schema["details"]
    kind = st.selectbox(
        "Fault", schema["kinds"], key="fault-kind", format_func=lambda k: details[k]["label"]
    )
    about = details[kind]
    fault: dict[str, Any] = {"kind": kind}
    if about["target"] != "server":
        if fleet.get("grouped"):  # a large fleet: its tiers, or a node by name
            clients, tiers = (
                [BY_NAME],
                [g["tier"] for g in fleet["groups"] if g["role"] == "client"],
            )
        else:
            clients = [n["name"] for n in fleet["nodes"] if n["role"] == "client"]
            tiers = [n["tier"] for n in fleet["nodes"] if n["role"] == "client"]
        targets = clients + [f"tier: {t}" for t in sorted(set(tiers))]
        target = st.selectbox("Target", targets, key="fault-target")
        if target == BY_NAME:
            fault["node"] = st.text_input("Node name", key="fault-node").strip()
        elif target.startswith("tier: "):
            fault["tier"] = target.removeprefix("tier: ")
        else:
            fault["node"] = target
    for name, field in about["params"].items():
        fault[name] = _param_input(name, field, name in about["required"])
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
