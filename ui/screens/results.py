"""Results: compare runs side by side — a metric overlaid per round, the configuration
keys that differ, and each run's metrics as CSV.
"""

import streamlit as st

from ui import client
from ui.views import results

st.title("Results")
chosen = results.pick_runs(client.runs())
if not chosen:
    st.info("Pick one or more runs to compare.")
    st.stop()
cmp = client.compare(tuple(chosen))
results.side_by_side(cmp)
results.overlay(chosen)
st.subheader("Configuration differences")
results.config_diff(cmp)
st.subheader("Download")
results.downloads(chosen)
