"""Compression: a TT-Edge run — per eps, compression ratio, reconstruction error and
accuracy before / after / after fine-tuning, the modelled engine figures, and the plots.
"""

import streamlit as st

from ui import client
from ui.views import common, compression

st.title("Compression")
run_id = common.pick_run(common.runs_of("compress"), key="compress_run", prefer_running=False)
if run_id is None:
    st.info("No compression runs in the store.")
    st.stop()
metrics = client.tagged_metrics(run_id)
st.subheader("Per eps")
compression.per_eps_table(metrics)
acc, ratio = st.columns(2, gap="large")
with acc:
    compression.accuracy(metrics)
with ratio:
    compression.ratio_and_error(metrics)
st.subheader("Engine (modelled)")
compression.engine_modelled(metrics)
st.subheader("Plots")
common.plots(run_id)
