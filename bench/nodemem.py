"""Peak memory of client nodes (whole process trees): RSS and PSS, sampled while running.

PSS (proportional set size) counts a page shared by k processes as 1/k to each, so the
sum over all processes is the memory really used; RSS counts it fully in each. Both
come from ``/proc/<pid>/smaps_rollup`` (``Rss:``, ``Pss:``) and are summed over a
node's processes (node agent, SuperNode, its executors / ClientApps).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from testbed.procs import children_map, descendant_pids

READY = re.compile(r"/nodes/([^/]+)/ready$")


def rollup_mb(pid: int) -> tuple[float, float]:
    """``(rss_mb, pss_mb)`` of one process from ``smaps_rollup``; zeros if it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0, 0.0
    kb = {k: 0 for k in ("Rss", "Pss")}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in kb:
            kb[key] = int(rest.split()[0])
    return kb["Rss"] / 1024, kb["Pss"] / 1024


def tree_mb(root: int, kids: dict[int, list[int]] | None = None) -> tuple[float, float]:
    """``(rss_mb, pss_mb)`` summed over ``root`` and its descendants.

    ``kids`` (:func:`children_map`) saves a walk of the whole process table per call:
    ``psutil``'s recursive ``children()`` reads every process's ``stat`` each time, so
    sampling 60 nodes that way cost the scale bench ~0.4 of this machine's 2 cores.
    """
    if kids is None:
        kids = children_map()
    if not psutil.pid_exists(root):
        return 0.0, 0.0
    pids = [root, *descendant_pids(root, kids)]
    rss = pss = 0.0
    for pid in pids:
        r, p = rollup_mb(pid)
        rss, pss = rss + r, pss + p
    return rss, pss


def testbed_nodes(under: Path) -> dict[str, int]:
    """Node name -> agent pid of warm client nodes whose ready file is ``under`` a dir.

    The agent writes its pid in its ready file (``<run>/nodes/<name>/ready``): this
    finds nodes started plainly and nodes forked by the local backend's zygote (whose
    command line is the zygote's) alike.
    """
    out: dict[str, int] = {}
    for ready in under.glob("**/nodes/*/ready"):
        m = READY.search(str(ready))
        try:
            pid = int(json.loads(ready.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            continue
        if m and psutil.pid_exists(pid):
            out[m.group(1)] = pid
    return out


def zygotes(under: Path) -> list[int]:
    """Pids of the local backend's fork servers of runs ``under`` a dir (their memory is
    shared by the nodes they forked: report it beside the nodes' own)."""
    found = {}
    for p in psutil.process_iter(["pid", "ppid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if "testbed.backends.zygote" in cmd and any(c.startswith(str(under)) for c in cmd):
            found[p.info["pid"]] = p.info["ppid"]
    # the nodes it forked carry its command line too: keep the one whose parent is not one
    return [pid for pid, ppid in found.items() if ppid not in found]


class PeakSampler:
    """Sample every node's tree every ``period_s`` in a thread; keep the peaks.

    Parameters
    ----------
    roots : callable
        Returns node name -> root pid (called at every sample: nodes may restart).
    period_s : float
        Seconds between samples.
    """

    def __init__(self, roots: Callable[[], dict[str, int]], period_s: float = 0.5) -> None:
        self.roots, self.period_s = roots, period_s
        self.rss: dict[str, float] = {}
        self.pss: dict[str, float] = {}
        self.total_pss = 0.0  # peak of the sum over nodes, MB
        self.shared_pss = 0.0  # peak PSS of the processes in ``shared`` (zygotes), MB
        self.shared: Callable[[], list[int]] = list  # pids whose memory the nodes share
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            total = 0.0
            kids = children_map()
            for name, pid in self.roots().items():
                rss, pss = tree_mb(pid, kids)
                self.rss[name] = max(self.rss.get(name, 0.0), rss)
                self.pss[name] = max(self.pss.get(name, 0.0), pss)
                total += pss
            self.total_pss = max(self.total_pss, total)
            shared = sum(rollup_mb(pid)[1] for pid in self.shared())
            self.shared_pss = max(self.shared_pss, shared)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
