"""What the controller does, without HTTP: experiments, launches, runs, fleet, faults.

The FastAPI routes in :mod:`testbed.controller.app` are thin wrappers over
:class:`Controller`. Errors a user can cause raise :class:`UserError` with an HTTP
status and a message (plus validation problems where there are some).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import tempfile
import time
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from testbed.controller.backends import DEFAULT_BACKEND, BackendOffer
from testbed.controller.fleet import fleet_state, planned_fleet
from testbed.controller.jobs import Job, JobManager
from testbed.planner import Plan, make_plan
from testbed.spec.loader import SpecError, expand, parse_set, parse_spec
from testbed.spec.models import Experiment
from testbed.store import RunRow, RunStore
from testbed.workloads import (
    WORKLOADS,
    load_builtin,
    section_of,
    section_of_spec,
    sections_of_spec,
    workload,
)

SUFFIXES = (".yaml", ".yml")
TOPOLOGY_KEYS = ("name", "seed", "profiles", "fleet", "links")
ARTIFACT_SUFFIXES = (".png", ".json", ".csv")


class UserError(Exception):
    """A request the controller cannot honour; ``status`` is the HTTP status."""

    def __init__(
        self, status: int, message: str, problems: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.problems = status, message, problems or []


def problems_of(err: SpecError) -> list[dict[str, Any]]:
    """Validation problems as plain dicts: ``path``, ``line`` (0 if unknown), ``message``."""
    return [{"path": p.path, "line": p.line, "message": p.message} for p in err.problems]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings/lists as ``{"a.b.0.c": leaf}``."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return {prefix: value}


@lru_cache(maxsize=256)
def _resolved_text(artifact_dir: str) -> str:
    return (Path(artifact_dir) / "spec.resolved.yaml").read_text()


def _resolved(artifact_dir: str) -> str | None:
    """The run's resolved spec; a miss is not cached (a starting run writes it soon)."""
    if not (Path(artifact_dir) / "spec.resolved.yaml").is_file():
        return None
    return _resolved_text(artifact_dir)


def _cause_text(store: RunStore, run: RunRow) -> str | None:
    """A failed run's cause as one line: ``error (node n, logs/n.log:12)``; else None."""
    from testbed.cause import failure_cause

    cause = failure_cause(store, run)
    return None if cause is None else f"{cause.message} ({cause.origin})"


class Controller:
    """The run store and the launches of one controller.

    Parameters
    ----------
    store_root : pathlib.Path
        Run store folder (``testbed.db`` and one folder per run).
    experiments_dir : pathlib.Path
        Folder of experiment YAML files offered for launch.
    """

    def __init__(self, store_root: Path, experiments_dir: Path) -> None:
        self.store_root = Path(store_root).resolve()
        self.experiments_dir = Path(experiments_dir).resolve()
        self.store = RunStore(self.store_root)
        self.jobs = JobManager(self.store_root)
        self.offer = BackendOffer()

    def backends(self) -> list[dict[str, Any]]:
        """Every registered backend and whether this host offers it now (and why not)."""
        return self.offer.rows()

    # -- experiments ----------------------------------------------------------------
    def experiments(self) -> list[dict[str, Any]]:
        """Experiment files: name, first comment line, whether they parse."""
        out = []
        for p in sorted(self.experiments_dir.iterdir() if self.experiments_dir.is_dir() else []):
            if p.suffix not in SUFFIXES or not p.is_file():
                continue
            text = p.read_text(encoding="utf-8")
            first = next((ln for ln in text.splitlines() if ln.startswith("#")), "")
            out.append({"name": p.name, "title": first.lstrip("# ").strip()})
        return out

    def experiment_file(self, name: str) -> Path:
        """A file of the experiments folder by name (no paths, YAML only)."""
        p = self.experiments_dir / name
        if Path(name).name != name or p.suffix not in SUFFIXES or not p.is_file():
            raise UserError(404, f"no experiment file {name!r} in {self.experiments_dir}")
        return p

    def experiment_text(self, name: str) -> str:
        return self.experiment_file(name).read_text(encoding="utf-8")

    def _expand(self, text: str, source: str, overrides: list[str]) -> list[Experiment]:
        """Every configuration of YAML text with overrides (SpecError: its problems)."""
        with tempfile.TemporaryDirectory() as d:
            name = Path(source).name
            if "\x00" in name or len(name.encode()) > 255:  # (not a file name: a 422)
                raise UserError(422, f"source: not a file name: {source[:80]!r}")
            p = Path(d) / (name or "experiment.yaml")
            p.write_text(text, encoding="utf-8")
            return [e for _a, e in expand(p, parse_set(overrides), self.experiments_dir)]

    def validate(
        self, text: str, source: str, overrides: list[str], backend: str | None = None
    ) -> dict[str, Any]:
        """Validate YAML text with overrides; every problem with its YAML path and line.
        With ``backend``: also whether this host offers it and its preflight takes the
        experiment (:meth:`BackendOffer.refusal`, what a launch on it checks)."""
        try:
            expanded = self._expand(text, source, overrides)
        except SpecError as e:
            return {"ok": False, "problems": problems_of(e)}
        if backend is not None and (refused := self.offer.refusal(backend, expanded)):
            return {"ok": False, "problems": refused[1], "refused": refused[0]}
        exp = expanded[0]
        return {
            "ok": True,
            "problems": [],
            "name": exp.name,
            "configurations": len(expanded),
            "repetitions": exp.repetitions,
            "runs": len(expanded) * exp.repetitions,
            "workload": section_of(exp),
            "grid": {k: list(v) for k, v in exp.sweep.grid.items()},
        }

    def fleet_of_text(self, text: str, overrides: list[str]) -> dict[str, Any]:
        """The planned fleet of an experiment (its first configuration)."""
        try:
            exp = parse_spec(text, "<experiment>", parse_set(overrides), self.experiments_dir)
        except SpecError as e:
            raise UserError(422, str(e), problems_of(e)) from None
        return planned_fleet(make_plan(exp))

    # -- launches -------------------------------------------------------------------
    def launch(
        self,
        experiment: str | None,
        text: str | None,
        name: str | None,
        overrides: list[str],
        backend: str = DEFAULT_BACKEND,
    ) -> Job:
        """Launch an experiment file by name, or YAML text (saved under ``specs/``), on
        ``backend``: 422 naming ``backend`` when it is unknown or not offered here now,
        422 with the backend's refusal when its preflight refuses the experiment."""
        if (experiment is None) == (text is None):
            raise UserError(422, "give exactly one of: experiment (a file name), text (YAML)")
        if refused := self.offer.refusal(backend):
            raise UserError(422, *refused)
        if experiment is not None:
            path = self.experiment_file(experiment)
            text = path.read_text(encoding="utf-8")
        else:
            assert text is not None
            stem = Path(name or "experiment.yaml").stem or "experiment"
            digest = hashlib.sha256(text.encode()).hexdigest()[:8]
            path = self.store_root / "specs" / f"{stem}-{digest}.yaml"
        check = self.validate(text, path.name, overrides, backend)
        if not check["ok"]:
            why = check.get("refused", "the experiment is invalid")
            raise UserError(422, why, check["problems"])
        if experiment is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        from testbed.runner import sweep_id_of

        total = check["runs"]
        sweep = sweep_id_of(str(path), text + json.dumps(overrides)) if total > 1 else None
        # a text's relative paths are read from the experiments folder, as in validate
        spec_dir = None if experiment is not None else self.experiments_dir
        return self.jobs.launch(path, overrides, total, sweep, spec_dir, backend)

    def job(self, job_id: str) -> dict[str, Any]:
        """A launch with its runs and progress (runs finished over runs planned)."""
        try:
            job = self.jobs.get(job_id)
        except KeyError as e:
            raise UserError(404, str(e.args[0])) from None
        runs = [r for r in self.store.runs() if r.pid == job.pid and r.created_at >= job.started_at]
        if job.sweep_id:
            done = [r for r in self.store.runs(job.sweep_id) if r.status == "completed"]
            finished = len({r.variant for r in done} | {r.variant for r in runs if r.finished_at})
        else:
            finished = sum(r.finished_at is not None for r in runs)
        return {
            **job.as_dict(),
            "runs": [r.run_id for r in runs],
            "finished": min(finished, job.total),
            "progress": min(finished, job.total) / job.total,
        }

    def all_jobs(self) -> list[dict[str, Any]]:
        return [self.job(j) for j in reversed(list(self.jobs.jobs))]

    def stop_job(self, job_id: str, force: bool = False) -> dict[str, Any]:
        try:
            self.jobs.stop(self.jobs.get(job_id), force)
        except KeyError as e:
            raise UserError(404, str(e.args[0])) from None
        return self.job(job_id)

    def stop_run(self, run_id: str) -> dict[str, Any]:
        """Stop a running run: SIGINT to the ``testbed run`` process that owns it."""
        run = self._run(run_id)
        if run.status != "running":
            raise UserError(409, f"run {run.run_id} is {run.status}, not running")
        job = self.jobs.by_pid(run.pid)
        if job is not None:
            self.jobs.stop(job)
            return {"run_id": run.run_id, "job_id": job.job_id, "signal": "SIGINT"}
        import psutil

        try:  # launched elsewhere (a terminal): only a `testbed run` process is signalled
            cmd = " ".join(psutil.Process(run.pid or -1).cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            cmd = ""
        if "testbed" not in cmd or " run " not in f" {cmd} ":
            raise UserError(409, f"run {run.run_id}: its process is gone or not a testbed run")
        os.kill(int(run.pid or 0), signal.SIGINT)
        return {"run_id": run.run_id, "job_id": None, "signal": "SIGINT"}

    def shutdown(self) -> None:
        self.jobs.shutdown()
        self.store.close()

    # -- runs -----------------------------------------------------------------------
    def _run(self, run_id: str) -> RunRow:
        try:
            return self.store.run(run_id)
        except KeyError as e:
            raise UserError(404, str(e.args[0])) from None

    def _spec_dict(self, run: RunRow) -> dict[str, Any]:
        text = _resolved(run.artifact_dir or "") if run.artifact_dir else None
        return yaml.safe_load(text) if text else {}

    def workloads(self) -> list[dict[str, Any]]:
        """Every registered workload: its section, its dashboard page (or None) and how
        many runs of it the store holds (the dashboard shows pages of those it holds)."""
        counts: dict[str | None, int] = {}
        for r in self.store.runs():
            for kind in sections_of_spec(self._spec_dict(r)):  # (a run may have several)
                counts[kind] = counts.get(kind, 0) + 1
        return [
            {
                "section": name,
                "page": asdict(cls.page) if cls.page else None,
                "runs": counts.get(name, 0),
            }
            for name, cls in ((n, WORKLOADS[n]) for n in load_builtin())
        ]

    def plan_of(self, run: RunRow) -> Plan:
        """The run's plan, from the resolved spec it snapshotted."""
        text = _resolved(run.artifact_dir or "")
        if text is None:
            raise UserError(404, f"run {run.run_id} has no spec.resolved.yaml")
        source = f"{run.run_id}/spec.resolved.yaml"
        try:
            return make_plan(parse_spec(text, source), run.seed)
        except SpecError:  # written by another testbed version: its topology is enough
            raw = yaml.safe_load(text) or {}
            keep = {k: raw[k] for k in TOPOLOGY_KEYS if k in raw}
            try:
                exp = parse_spec(yaml.safe_dump({**keep, "workload": {"fl": {}}}), source)
            except SpecError as e:
                raise UserError(409, f"run {run.run_id}: cannot read its fleet: {e}") from None
            return make_plan(exp, run.seed)

    def run_row(self, run: RunRow) -> dict[str, Any]:
        s = run.summary_dict
        spec = self._spec_dict(run)
        job = self.jobs.by_pid(run.pid) if run.status == "running" else None
        return {
            "run_id": run.run_id,
            "name": run.name,
            "status": run.status,
            "sweep_id": run.sweep_id,
            "variant": run.variant,
            "backend": run.backend,
            "seed": run.seed,
            "spec_path": run.spec_path,
            "created_at": run.created_at,
            "finished_at": run.finished_at,
            "wall_s": s.get("wall_s"),
            "final_global_acc": s.get("final_global_acc"),
            "workload": section_of_spec(spec),
            "workloads": sections_of_spec(spec),
            "job_id": job.job_id if job else None,
            "cause": _cause_text(self.store, run),
        }

    def runs(self) -> list[dict[str, Any]]:
        """Every run, newest first (runs whose process vanished are marked interrupted)."""
        self.store.mark_stale()
        return [self.run_row(r) for r in reversed(self.store.runs())]

    def run(self, run_id: str) -> dict[str, Any]:
        """One run: its row, summary, metadata and round progress."""
        run = self._run(run_id)
        spec = self._spec_dict(run)
        kind = section_of_spec(spec)
        section = (spec.get("workload") or {}).get(kind) or {}
        ends = [e for e in self.store.events(run.run_id) if e[2] in ("round_end", "fleet_ready")]
        meta_path = Path(run.artifact_dir or "") / "meta.json"
        # --backend simulation: its virtual clock (modelled) at the last round's end
        vt = self.store.metrics(run.run_id, "virtual_time_s")
        return {
            **self.run_row(run),
            "summary": run.summary_dict,
            "meta": json.loads(meta_path.read_text()) if meta_path.is_file() else {},
            "rounds_total": workload(kind).rounds(section) if kind else None,
            "rounds_done": max((e[3] or 0 for e in ends if e[2] == "round_end"), default=0),
            "fleet_ready": any(e[2] == "fleet_ready" for e in ends),
            "virtual_time_s": vt[-1].value if vt else None,
            "virtual_round": vt[-1].round if vt else None,
        }

    def spec_text(self, run_id: str) -> str:
        run = self._run(run_id)
        return _resolved(run.artifact_dir or "") or ""

    def metrics_since(self, run_id: str, since: int) -> dict[str, Any]:
        run = self._run(run_id)
        rows = self.store.metrics_since(run.run_id, since)
        keys = ("id", "round", "node", "name", "value", "ts")
        return {
            "rows": [dict(zip(keys, r, strict=True)) for r in rows],
            "cursor": rows[-1][0] if rows else since,
        }

    def events_since(self, run_id: str, since: int) -> dict[str, Any]:
        run = self._run(run_id)
        rows = self.store.events(run.run_id, since)
        out = [{**e._asdict(), "data": json.loads(e.data) if e.data else {}} for e in rows]
        return {"rows": out, "cursor": rows[-1].id if rows else since}

    def tagged_metrics(self, run_id: str) -> list[dict[str, Any]]:
        """Every metric row of a run with its tags (scheme, num_tasks, snr_db, eps, kind...)."""
        run = self._run(run_id)
        keys = ("round", "node", "name", "value", "tags")
        return [dict(zip(keys, r, strict=True)) for r in self.store.tagged_metrics(run.run_id)]

    def artifacts(self, run_id: str) -> list[str]:
        """Files a run wrote at the top of its folder that the dashboard may show."""
        run = self._run(run_id)
        folder = Path(run.artifact_dir or "")
        if not run.artifact_dir or not folder.is_dir():
            return []
        return sorted(
            p.name for p in folder.iterdir() if p.is_file() and p.suffix in ARTIFACT_SUFFIXES
        )

    def artifact_path(self, run_id: str, name: str) -> Path:
        """Path of one of :meth:`artifacts` (any other name: 404)."""
        if name not in self.artifacts(run_id):
            raise UserError(404, f"run {run_id} has no artifact {name!r}")
        return Path(self._run(run_id).artifact_dir or "") / name

    def round_status(self, run_id: str) -> list[dict[str, Any]]:
        run = self._run(run_id)
        keys = ("round", "node", "status", "reason")
        return [dict(zip(keys, r, strict=True)) for r in self.store.round_status(run.run_id)]

    def fleet(self, run_id: str) -> dict[str, Any]:
        """Nodes and links of a run with their state now (or at the end of the run); a
        large fleet by group (:mod:`testbed.controller.fleet_groups`)."""
        run = self._run(run_id)
        plan = self.plan_of(run)
        fleet = fleet_state(
            plan,
            self.store.events(run.run_id),
            self.store.metrics(run.run_id),
            run.status,
            self.store.round_status(run.run_id),
        )
        return {**fleet, "run_id": run.run_id, "backend": run.backend}

    def timeline(self, run_id: str) -> dict[str, Any]:
        """Every workload's key metric and every event of a run on one time axis, and
        the workloads each node hosts (:mod:`testbed.controller.timeline`)."""
        from testbed.controller.lanes import LINK_KEYS, LaneNode
        from testbed.controller.timeline import run_timeline

        run = self._run(run_id)
        plan = self.plan_of(run)
        hosts = {n.name: list(n.workloads) for n in plan.nodes}
        nodes = [
            LaneNode(n.name, n.tier, {k: getattr(n.uplink, k, None) for k in LINK_KEYS})
            for n in plan.nodes
        ]
        spec = self._spec_dict(run)
        sections = sections_of_spec(spec)
        specs = {s: (spec.get("workload") or {}).get(s) or {} for s in sections}
        return {
            **run_timeline(self.store, run.run_id, sections, hosts, nodes, specs),
            "backend": run.backend,
            "status": run.status,
            "cause": _cause_text(self.store, run),
        }

    def metrics_csv(self, run_id: str) -> tuple[str, str]:
        run = self._run(run_id)
        return run.run_id, self.store.metrics_frame(run.run_id).to_csv(index=False)

    def compare(self, run_ids: list[str]) -> dict[str, Any]:
        """Side by side: each run's row, and the resolved-spec keys whose values differ."""
        runs = [self._run(r) for r in run_ids]
        flats = [flatten(self._spec_dict(r)) for r in runs]
        keys = sorted(set().union(*flats)) if flats else []
        diff = [
            {"key": k, "values": [f.get(k) for f in flats]}
            for k in keys
            if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1
        ]
        return {
            "runs": [self.run_row(r) for r in runs],
            "diff": diff,
            "same_keys": len(keys) - len(diff),
        }

    # -- faults ---------------------------------------------------------------------
    @staticmethod
    def fault_schema() -> dict[str, Any]:
        """Fault kinds and their parameters, from the registry (``testbed.faults``).

        ``kinds``: the names a live injection may use (kinds with a live action), sorted;
        ``details``: per registered kind its ``label``, ``marker``, ``target`` (node,
        link or server), ``effects`` (event names), ``live``, ``simulated``, ``params``
        (JSON schema of each parameter) and ``required`` parameters.
        """
        from testbed.faults import schema

        details = schema()
        return {"kinds": sorted(k for k, d in details.items() if d["live"]), "details": details}

    def inject(self, run_id: str, fault: dict[str, Any]) -> dict[str, Any]:
        """Queue a live fault (applied now by the run's chaos engine); return its id."""
        from pydantic import ValidationError

        from testbed.spec.models import FaultSpec

        run = self._run(run_id)
        if run.status != "running":
            raise UserError(409, f"run {run.run_id} is {run.status}, not running")
        spec = {k: v for k, v in fault.items() if v is not None}
        spec.update(at_time_s=0.0, phase="during")
        try:
            FaultSpec.model_validate(spec)
        except ValidationError as e:
            msgs = [
                {"path": ".".join(map(str, x["loc"])), "line": 0, "message": x["msg"]}
                for x in e.errors()
            ]
            raise UserError(422, "invalid fault", msgs) from None
        from testbed.faults import FAULT_KINDS

        if not FAULT_KINDS[spec["kind"]].live():
            msg = f"fault kind {spec['kind']!r} has no live action (only a planned, simulated one)"
            raise UserError(422, "invalid fault", [{"path": "kind", "line": 0, "message": msg}])
        names = {n.name for n in self.plan_of(run).clients}
        ids = {n.rsplit("-", 1)[0] for n in names}
        node = spec.get("node")
        if node is not None and node not in names | ids:
            raise UserError(
                422, f"node {node!r} is not a client node of this run ({sorted(names)})"
            )
        inj = self.store.add_injection(run.run_id, spec)
        return {"injection_id": inj, "run_id": run.run_id, "spec": spec, "queued_at": time.time()}

    def injection_status(self, inj_id: int) -> str:
        return self.store.injection_status(inj_id)

    def injections(self, run_id: str) -> list[dict[str, Any]]:
        run = self._run(run_id)
        return [
            {"id": i, "ts": ts, "spec": json.loads(spec), "status": st}
            for i, ts, spec, st in self.store.injections(run.run_id)
        ]
