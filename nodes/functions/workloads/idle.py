"""An idle function (Gaia's idle-wait workload): waits, uses no tensor framework.

Request: ``{"wait_ms": 20}``. The execution mode identifier classifies it ``cpu``: it
must never hold a GPU under the gaia policies.
"""

from __future__ import annotations

import time
from typing import Any


def make_request(params: dict[str, Any], i: int) -> dict[str, Any]:
    return {"wait_ms": float(params.get("wait_ms", 20.0)), "i": i}


def handler(request: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(request.get("wait_ms", 20.0)) / 1000.0)
    return {"waited_ms": request.get("wait_ms", 20.0)}
