"""Experiments page sections: pick/upload/edit a spec, validate it, launch, watch launches."""

from __future__ import annotations

from typing import Any

import streamlit as st

from ui import client

UPLOAD = "Upload a file…"


def spec_editor() -> tuple[str, str, bool]:
    """Choose an experiment file (or upload one) and edit it.

    Returns
    -------
    tuple
        ``(text, file name, unchanged)``; ``unchanged`` is True when the text is the
        experiment file as stored (it is then launched by name, so its sweep resumes).
    """
    names = [e["name"] for e in client.experiments()]
    titles = {e["name"]: e["title"] for e in client.experiments()}
    default = "quickstart.yaml" if "quickstart.yaml" in names else (names or [UPLOAD])[0]
    st.session_state.setdefault("experiment", default)
    choice = st.selectbox(
        "Experiment",
        [*names, UPLOAD],
        key="experiment",
        format_func=lambda n: n if n == UPLOAD else f"{n} — {titles.get(n, '')}",
    )
    if choice == UPLOAD:
        up = st.file_uploader("Experiment YAML", type=["yaml", "yml"])
        if up is None:
            return "", "upload.yaml", False
        original, source = up.getvalue().decode("utf-8"), up.name
    else:
        original, source = client.experiment_text(choice), choice
    text = st.text_area(
        "Spec (editable)", original, height=360, key=f"editor-{source}-{hash(original)}"
    )
    return text, source, choice != UPLOAD and text == original


def overrides_input() -> tuple[str, ...]:
    """``key.path=value`` overrides, one per line (as ``testbed run --set``)."""
    raw = st.text_input(
        "Overrides (--set), comma-separated",
        key="overrides",
        placeholder="workload.fl.rounds=2, seed=7",
    )
    return tuple(s.strip() for s in raw.split(",") if s.strip())


def backend_picker() -> str:
    """Where to launch: the backends this host offers now are selectable (the
    controller's ``GET /backends``); the others are listed with the reason why not.

    Returns
    -------
    str
        The chosen backend's name (``local`` when nothing else is offered).
    """
    rows = client.backends()
    offered = [b["name"] for b in rows if b["available"]] or ["local"]
    summary = {b["name"]: b["summary"] for b in rows}
    default = next((b["name"] for b in rows if b["default"] and b["available"]), offered[0])
    st.session_state.setdefault("backend", default)
    if st.session_state["backend"] not in offered:  # (it went away since it was picked)
        st.session_state["backend"] = default
    choice = st.selectbox(
        "Backend",
        offered,
        key="backend",
        help="where the run's nodes live: `testbed run --backend`",
        format_func=lambda n: f"{n} — {summary.get(n, '')}",
    )
    missing = [b for b in rows if not b["available"]]
    if missing:
        names = ", ".join(b["name"] for b in missing)
        with st.expander(f"Not available on this host now: {names}"):
            for b in missing:
                st.markdown(f"- **{b['name']}** — {b['reason']}")
    return str(choice)


def validation_report(check: dict[str, Any]) -> None:
    """Validation verdict; every problem with its line and YAML path."""
    if check["ok"]:
        grid = f", grid over {', '.join(check['grid'])}" if check["grid"] else ""
        st.success(
            f"valid: **{check['name']}** ({check['workload']}) — {check['configurations']} "
            f"configuration(s) × {check['repetitions']} repetition(s) = {check['runs']} run(s)"
            + grid
        )
        return
    if check.get("refused"):  # the backend's preflight (or its absence), not the YAML
        st.error(check["refused"])
        return
    st.error(f"{len(check['problems'])} problem(s) — fix them to launch")
    for p in check["problems"]:
        where = f"line {p['line']}" if p["line"] else "(no line)"
        st.markdown(f"- **{where}** · `{p['path'] or '<top>'}` — {p['message']}")


def launch_button(
    check: dict[str, Any],
    text: str,
    source: str,
    unchanged: bool,
    overrides: tuple[str, ...],
    backend: str = "local",
) -> None:
    """Launch the experiment on ``backend`` (disabled while it is invalid there)."""
    if not st.button("Launch", type="primary", disabled=not check["ok"], icon=":material/rocket:"):
        return
    try:
        if unchanged:
            job = client.launch(overrides, experiment=source, backend=backend)
        else:
            job = client.launch(overrides, text=text, name=source, backend=backend)
    except client.ControllerError as e:
        st.error(e.message)
        for p in e.problems:
            st.markdown(f"- line {p['line']} · `{p['path']}` — {p['message']}")
        return
    st.session_state["run_id"] = None  # the Live run page follows the newest running run
    st.success(
        f"launched {job['job_id']} ({job['total']} run(s)) on {job['backend']}; "
        "watch it on Live run"
    )


def _launch_row(job: dict[str, Any]) -> None:
    name = job["spec_path"].rsplit("/", 1)[-1]
    sets = f" `{' '.join(job['overrides'])}`" if job["overrides"] else ""
    st.markdown(f"**{job['job_id']}** · {name}{sets} · `{job['backend']}` · {job['state']}")
    st.progress(job["progress"], text=f"{job['finished']}/{job['total']} run(s) finished")
    if job["state"] == "running" and st.button("Stop", key=f"stop-{job['job_id']}"):
        client.stop_launch(job["job_id"])
        st.toast(f"stopping {job['job_id']}")


def launches() -> None:
    """Launches of this controller, each with a progress bar over its runs; refreshed."""

    @st.fragment(run_every=2.0)
    def draw() -> None:
        jobs = client.launches()
        if not jobs:
            st.caption("no launches yet")
        for job in jobs:
            _launch_row(job)

    draw()
