"""continuum-testbed dashboard: a router over its pages (``streamlit run ui/app.py``).

Every page gets its data from the controller over HTTP (``ui/client.py``); set
``TESTBED_CONTROLLER_URL`` (default http://127.0.0.1:8000) and ``TESTBED_TOKEN`` if the
controller wants one. ``testbed up`` starts both. A workload's own page (Radio,
Compression, Functions) comes from the controller's ``/workloads`` (the workloads
registry) and shows only when the store holds runs of that workload.
"""

import streamlit as st

from ui import client
from ui.views.common import controller_status

st.set_page_config(page_title="continuum-testbed", page_icon=":material/hub:", layout="wide")
controller_status()
pages = [
    st.Page("screens/fleet.py", title="Fleet", icon=":material/hub:", url_path="fleet"),
    st.Page(
        "screens/experiments.py",
        title="Experiments",
        icon=":material/science:",
        url_path="experiments",
    ),
    st.Page("screens/live.py", title="Live run", icon=":material/monitoring:", url_path="live"),
    st.Page("screens/chaos.py", title="Chaos", icon=":material/bolt:", url_path="chaos"),
    st.Page("screens/results.py", title="Results", icon=":material/compare:", url_path="results"),
    st.Page(
        "screens/timeline.py", title="Timeline", icon=":material/timeline:", url_path="timeline"
    ),
]
# each workload's page, as its registered class names it (testbed.workloads), shown
# once the store holds runs of it
pages += [
    st.Page(p["path"], title=p["title"], icon=p["icon"], url_path=p["url_path"])
    for p in client.workload_pages()
]
st.navigation(pages).run()
