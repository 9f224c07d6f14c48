"""The ``simulation`` section of an experiment: read by ``--backend simulation`` only.

::

    simulation:
      ray_address: 127.0.0.1:6379      # attach to a running Ray cluster (default: local)
      num_cpus: 2                      # Ray CPUs of a local cluster
      client_cpus: 1.0                 # Ray CPUs per ClientApp actor
      protocol_delay_s: null           # the clock's protocol term per exchange, seconds;
                                       # null: measured default of workload.fl.protocol_timing
      startup_s: null                  # added to a client's first exchange, seconds;
                                       # null: measured default of workload.fl.protocol_timing
      latency_legs: 7                  # one-way link latencies per exchange beyond the
                                       # payload transfers' (Flower's request sequence)
      startup_latency_legs: 4          # more on a client's first exchange (GetRun, GetFab)
      flow_window_bytes: 65535         # HTTP/2 flow-control window (null: no window waits)
      server_reply_s: 0.05             # the ServerApp's serial work per reply, seconds
      poll_grid: false                 # play Flower's poll grids (SuperNode pulls, the
                                       # ServerApp's reply polls) on the virtual clock
      availability:                    # per-client on/off trace (docs/simulation.md)
        path: traces/availability_diurnal_50.csv  # relative to the spec
        format: auto                   # intervals | fedscale | auto (by content)
        time_scale: 1.0                # trace seconds per virtual second
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kernel.frozen import Frozen, SpecFile
from testbed.simulation.protocol import (
    FLOW_WINDOW_BYTES,
    LATENCY_LEGS,
    SERVER_REPLY_S,
    STARTUP_LATENCY_LEGS,
    ProtocolModel,
)


class AvailabilitySpec(Frozen):
    """A per-client availability trace on the virtual clock."""

    path: SpecFile = Field(
        description="trace file (intervals CSV or FedScale-style JSON/pickle), relative to "
        "the spec"
    )
    format: Literal["auto", "intervals", "fedscale"] = "auto"
    time_scale: float = Field(1.0, gt=0, description="trace seconds per virtual second")


class SimulationSpec(Frozen):
    """Settings of ``--backend simulation`` (ignored by the other backends)."""

    ray_address: str | None = Field(
        None, description="host:port of a running Ray cluster's head (ray start --head)"
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray (default 2)")
    client_cpus: float = Field(1.0, gt=0, description="Ray CPUs per ClientApp actor")
    protocol_delay_s: float | None = Field(
        None,
        ge=0,
        description="seconds added to every client exchange on the virtual clock (Flower's "
        "protocol time); null: the default measured for workload.fl.protocol_timing",
    )
    startup_s: float | None = Field(
        None,
        ge=0,
        description="seconds added to a client's first train exchange of the run on the "
        "virtual clock (a real node's first-round costs); null: the default measured for "
        "workload.fl.protocol_timing",
    )
    latency_legs: float = Field(
        LATENCY_LEGS,
        ge=0,
        description="one-way link latencies added to every client exchange on the virtual "
        "clock (Flower's requests beyond the payload transfers; testbed/simulation/protocol.py)",
    )
    startup_latency_legs: float = Field(
        STARTUP_LATENCY_LEGS,
        ge=0,
        description="one-way link latencies added to a client's first exchange (GetRun, GetFab)",
    )
    flow_window_bytes: int | None = Field(
        FLOW_WINDOW_BYTES,
        gt=0,
        description="flow-control window of a payload transfer on the virtual clock, bytes "
        "(gRPC's HTTP/2 initial window); null: no window waits",
    )
    server_reply_s: float = Field(
        SERVER_REPLY_S,
        ge=0,
        description="the ServerApp's serial work per reply on the virtual clock, seconds",
    )
    poll_grid: bool = Field(
        False,
        description="play Flower's poll grids on the virtual clock (each SuperNode's pulls, "
        "the ServerApp's reply polls; phases from the seed) instead of their expected "
        "wait inside protocol_delay_s",
    )
    availability: AvailabilitySpec | None = None

    def protocol_model(self) -> ProtocolModel:
        """The clock's protocol-on-the-link terms of this spec."""
        return ProtocolModel(
            self.latency_legs, self.startup_latency_legs, self.flow_window_bytes,
            self.server_reply_s,
        )  # fmt: skip
