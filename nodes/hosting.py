"""Where a workload runs when a spec holds several (``workload.<section>.nodes``).

Every fleet workload's section model derives from :class:`Hosted`: the nodes it runs
on and the GPU slots it holds for its whole run. The testbed checks both against the
fleet (unknown nodes, a GPU slot claimed by two workloads) and the runner starts each
workload on its nodes of one shared fleet (see docs/workloads.md).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kernel.frozen import Frozen


class Hosted(Frozen):
    """Placement keys every fleet workload section accepts.

    Attributes
    ----------
    nodes : list[str] or None
        Node names (or node ids, meaning all their replicas) the workload runs on;
        None: every node of the fleet (the behaviour of a one-workload spec).
    gpu_slots : dict[str, int]
        GPU slots the workload holds on a node for its whole run (node name -> slots);
        no other workload of the run may place anything in them.
    """

    nodes: list[str] | None = Field(
        None, min_length=1, description="node names or ids it runs on; None: every node"
    )
    gpu_slots: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="GPU slots held per node for the whole run"
    )
