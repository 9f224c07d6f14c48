"""Timeline: one run, every workload's key metric and every event on one time axis
(seconds after the fleet was ready), and which workloads each node hosts.
"""

import streamlit as st

from ui import client
from ui.views import common, timeline

st.title("Timeline")
runs = client.runs()
if not runs:
    common.wait_for_runs("No runs yet: launch one on the Experiments page.")
run_id = common.pick_run(runs, key="timeline_run", prefer_running=False)
if run_id is None:
    st.stop()
running = client.run(run_id)["status"] == "running"
timeline.draw(run_id, running)
