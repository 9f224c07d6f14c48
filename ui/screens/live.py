"""Live run: progress, accuracy and loss per round (global, federated, per silo), any
metric series by name (a user's Flower App: its own), link throughput, each node's
status per round, and the events timeline with faults marked — refreshing by itself.
"""

import streamlit as st

from ui import client
from ui.views import common, live

st.title("Live run")
run_id = common.pick_run(client.runs())
if run_id is None:
    common.wait_for_runs("No runs yet: launch one on the Experiments page.")
running = client.run(run_id)["status"] == "running"
live.header(run_id, running)
st.subheader("Learning")
live.curves(run_id, running)
st.subheader("Statuses per round")
live.statuses(run_id, running)
st.subheader("Events")
live.timeline(run_id, running)
