"""Functions: a serverless functions run (Gaia) — per function its node, mode, backends,
latency against its SLO and GPU-seconds; latency over time coloured by backend; the
dynamic runtime's decisions; and why each function got its mode and node.
"""

import streamlit as st

from ui import client
from ui.views import common, functions

st.title("Functions")
run_id = common.pick_run(common.runs_of("functions"), key="functions_run", prefer_running=False)
if run_id is None:
    st.info("No serverless functions runs in the store.")
    st.stop()
summary = client.run(run_id)["summary"] or {}
summary = (summary.get("workloads") or {}).get("functions", summary)  # beside other workloads
metrics = functions.function_metrics(run_id)
st.subheader("Per function")
functions.per_function(summary, metrics)
st.subheader("Latency over time, by backend")
functions.latency_timeline(summary, metrics)
st.subheader("Runtime decisions")
functions.decisions(metrics)
with st.expander("Why each mode and node (identifier and placement)"):
    functions.reasons(summary, metrics)
