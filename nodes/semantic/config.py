"""``workload.semantic_offload``: K task encoders on edge devices, the fog answers.

Only pydantic and light modules are imported here (validating a spec loads no torch).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from nodes.hosting import Hosted
from radio.config import SemanticMuxSpec

__all__ = ["OFFLOAD_SCHEMES", "SemanticOffloadSpec"]

#: The schemes a device can offload with: semantic multiplexing and its two baselines.
OFFLOAD_SCHEMES = ("semantic_mux", "orthogonal", "bit_level")
Scheme = Literal["semantic_mux", "orthogonal", "bit_level"]

def _all_schemes() -> list[Scheme]:
    return ["semantic_mux", "orthogonal", "bit_level"]


#: Training defaults of an offload run (short: the model trains in the run's process).
QUICK_MODEL = SemanticMuxSpec(
    quick=True, device="cpu", num_tasks_list=(4,), quick_train_steps=300, channel_bank_size=512,
    snr_db_list=(10.0,),
)


class SemanticOffloadSpec(Hosted):
    """Edge devices offload K inference tasks to a fog node over their links.

    A fleet workload (:class:`~nodes.hosting.Hosted`): it runs on its devices and its fog
    (``nodes`` defaults to them and, when given, must hold them), beside other workloads.

    Attributes
    ----------
    devices : list[str]
        Edge nodes that run the K task encoders (one process each).
    fog : str
        The node that runs the channel (Sionna), the demultiplexer and the task heads.
    schemes : list[str]
        Offload schemes, each run on the same samples and links, one after the other.
    num_tasks : int
        K: tasks multiplexed per inference (the first K of ``model.tasks``).
    requests : int
        Inferences per device and scheme (each carries one sample of every task).
    snr_db : float or None
        SNR [dB] of the Sionna channel the fog applies; None: the device link's
        mmwave SNR at the start (its ``snr_db``, or from its distance), else 10 dB.
    model : SemanticMuxSpec
        Channel, tasks, architecture and training of the schemes (``semantic_mux`` keys;
        ``num_tasks_list`` and ``snr_db_list`` are not used).
    timeout_s : float
        Longest a device may take for all its requests, s.
    interval_s : float
        Time between the starts of a device's inferences, s (0: back to back; an
        inference that takes longer delays the next, none is skipped).
    """

    devices: list[str] = Field(min_length=1)
    fog: str
    schemes: list[Scheme] = Field(default_factory=_all_schemes, min_length=1)
    num_tasks: int = Field(4, ge=1, le=16)
    requests: int = Field(100, ge=1, le=100_000)
    snr_db: float | None = Field(None, ge=-30, le=60)
    model: SemanticMuxSpec = QUICK_MODEL
    timeout_s: float = Field(300.0, gt=0)
    interval_s: float = Field(0.0, ge=0, le=3600)

    @model_validator(mode="before")
    @classmethod
    def _own_nodes(cls, data: Any) -> Any:
        """``nodes`` defaults to the devices and the fog (not every node of the fleet)."""
        if isinstance(data, dict) and data.get("nodes") is None and "devices" in data:
            devices = data["devices"] if isinstance(data["devices"], list) else []
            return {**data, "nodes": [*devices, data.get("fog")]}
        return data

    @model_validator(mode="after")
    def _check(self) -> SemanticOffloadSpec:
        errors = []
        if self.num_tasks > len(self.model.tasks):
            errors.append(
                f"num_tasks: {self.num_tasks} exceeds the {len(self.model.tasks)} task(s) "
                "of model.tasks"
            )
        if self.fog in self.devices:
            errors.append(f"fog: {self.fog!r} is also a device; a device offloads to another node")
        if len(set(self.devices)) != len(self.devices):
            errors.append(f"devices: each device may appear once, got {self.devices}")
        if len(set(self.schemes)) != len(self.schemes):
            errors.append(f"schemes: each scheme may appear once, got {self.schemes}")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    def pinned_nodes(self) -> list[tuple[str, str]]:
        """``(path, node)`` of the nodes it must run on (checked against ``nodes``)."""
        return self.node_references()

    def own_link_nodes(self) -> list[tuple[str, str]]:
        """``(path, node)`` of the nodes whose link leads to this workload's fog."""
        return [(f"devices.{i}", d) for i, d in enumerate(self.devices)]

    def node_references(self) -> list[tuple[str, str]]:
        """``(path under the section, node name)`` of every node it names."""
        return [(f"devices.{i}", d) for i, d in enumerate(self.devices)] + [("fog", self.fog)]
