"""The measured figures the simulation's protocol defaults come from, read from
docs/results/calibration.md (the record of the runs), so that a test compares a default
with the measurement and not with the constant it is defined from."""

from __future__ import annotations

import statistics
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "results" / "calibration.md"
SWEEP_HEADER = "| timing | Mbit/s | latency ms | start UTC | round s | protocol s |"

#: The earlier runs' ``flower`` defaults (runs A-E and M, stores gone) and what the
#: protocol terms add on their slowest spec (``jet-2``, 5 Mbit/s, 60 ms), as the doc
#: gives them ("New defaults"): 7 legs 0.42 s + window 0.06 s + a reply alone 0.05 s on
#: every exchange; 4 start-up legs 0.24 s on the first.
FLOWER_OLD_DELAY_S, FLOWER_OLD_STARTUP_S = 7.44, 2.30
FLOWER_TERMS_S, FLOWER_STARTUP_TERMS_S = 0.42 + 0.06 + 0.05, 0.24
#: The doc's figures are rounded to 0.01 s each (four of them summed).
DOC_ROUNDING_S = 0.03


def sweep(timing: str) -> list[dict[str, float]]:
    """The latency sweep's rows of ``timing``: Mbit/s, latency, constant and round-1
    excess, seconds."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(SWEEP_HEADER))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == timing:
            rows.append({"mbps": float(cells[1]), "latency_ms": float(cells[2]),
                         "constant_s": float(cells[7]), "excess_s": float(cells[8])})
    return rows


def measured_fast() -> tuple[float, float]:
    """``fast``: the median constant and the median round-1 excess of the sweep's runs
    (protocol delay, start-up), seconds."""
    rows = sweep("fast")
    assert len(rows) == 11, rows  # the doc's "11 fast sweep runs"
    return (statistics.median(r["constant_s"] for r in rows),
            statistics.median(r["excess_s"] for r in rows))


def derived_flower() -> tuple[float, float]:
    """``flower``: the earlier runs' defaults less what the new terms add (protocol
    delay, start-up), seconds."""
    return FLOWER_OLD_DELAY_S - FLOWER_TERMS_S, FLOWER_OLD_STARTUP_S - FLOWER_STARTUP_TERMS_S
