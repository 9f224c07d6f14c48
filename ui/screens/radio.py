"""Radio: a semantic multiplexing run — accuracy against K and SNR per scheme, load and
latency against K (measured or modelled, as the rows say), and the run's plots.
"""

import streamlit as st

from ui import client
from ui.views import common, radio

st.title("Radio")
run_id = common.pick_run(common.runs_of("semantic_mux"), key="radio_run", prefer_running=False)
if run_id is None:
    st.info("No semantic multiplexing runs in the store.")
    st.stop()
metrics = client.tagged_metrics(run_id)
by_k, by_snr = st.columns(2, gap="large")
with by_k:
    st.subheader("Accuracy vs K")
    radio.accuracy_vs_k(metrics)
with by_snr:
    st.subheader("Accuracy vs SNR")
    radio.accuracy_vs_snr(metrics)
st.subheader("Load and latency vs K")
radio.load_latency_vs_k(metrics)
st.subheader("Baseline / semantic mux")
radio.ratios(metrics)
st.subheader("Plots")
common.plots(run_id)
