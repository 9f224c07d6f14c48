"""Experiments: pick a YAML file, upload or edit one, see validation errors inline with
their lines and paths, pick a backend this host offers, launch it, and follow launches
(sweeps: a progress bar over runs).
"""

import streamlit as st

from ui import client
from ui.views import experiments

st.title("Experiments")
edit, follow = st.columns([3, 2], gap="large")
with edit:
    text, source, unchanged = experiments.spec_editor()
    overrides = experiments.overrides_input()
    backend = experiments.backend_picker()
    if text.strip():
        check = client.validate(text, source, overrides, backend)
        experiments.validation_report(check)
        experiments.launch_button(check, text, source, unchanged, overrides, backend)
with follow:
    st.subheader("Launches")
    experiments.launches()
