"""Chaos: break a running run now — crash a node, cut or slow its link, make it
straggle — and watch the fleet react.
"""

import streamlit as st

from ui import client
from ui.views import chaos, common

st.title("Chaos")
running = [r for r in client.runs() if r["status"] == "running"]
if not running:
    st.info("No run is running: launch one on the Experiments page, then break it here.")
    st.stop()
run_id = common.pick_run(running, label="Running run")
form, fleet = st.columns([2, 3], gap="large")
with form:
    st.subheader("Inject a fault now")
    chaos.fault_form(run_id, client.fleet(run_id))
    st.subheader("Injected")
    chaos.history(run_id)
with fleet:
    common.live_fleet(run_id, running=True)
