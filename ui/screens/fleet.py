"""Fleet: the continuum as a picture — tiers as layers, nodes and links coloured by state.

Shows a run's fleet as it is now (live while the run runs), or the planned fleet of an
experiment file before any run.
"""

import streamlit as st

from ui import client
from ui.views import common

st.title("Fleet")
runs = client.runs()
source = st.radio(
    "Show",
    ["a run", "an experiment file"],
    horizontal=True,
    index=0 if runs else 1,
    key="fleet-source",
)
if source == "a run" and runs:
    run_id = common.pick_run(runs)
    common.live_fleet(run_id, running=client.run(run_id)["status"] == "running")
elif source == "a run":
    st.info("No runs yet: launch one on the Experiments page.")
else:
    name = st.selectbox("Experiment", [e["name"] for e in client.experiments()])
    try:
        common.fleet_picture(client.planned_fleet(client.experiment_text(name)))
    except client.ControllerError as e:
        st.error(f"{name} has no fleet to draw: {e.message}")
