"""GPU profiles on the docker backend: a real NVIDIA GPU passed through, or the model.

A node whose device profile names an NVIDIA data-centre ``accelerator`` (``cloud-gpu``:
an H100, ``fog-gpu``: a T4; a Jetson's embedded GPU stays modelled) gets the host's
NVIDIA GPUs in its container
(``device_requests``: ``docker run --gpus all``) when the host can give them: an NVIDIA
device node (``/dev/nvidia0``) and an engine with the ``nvidia`` runtime (the NVIDIA
Container Toolkit). Elsewhere the accelerator stays the labelled emulation (the function
runtime and the LLM stages price GPU work with the profile's figures, docs/functions.md),
and the run says so: :func:`gpu_note` is the summary's ``gpu`` line either way.

Not verified on a GPU here: this machine has none, and no device machine was lent to
the session that wrote it; the decision (which nodes, which request) is tested, the
CUDA path inside the containers is not.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import docker

    from testbed.planner import Plan, PlannedNode

#: The device node an NVIDIA driver creates for the first GPU.
DEVICE = Path("/dev/nvidia0")


def gpu_unavailable(client: docker.DockerClient, device: Path = DEVICE) -> str | None:
    """Why this host cannot pass a GPU to containers (None: it can)."""
    if not device.exists():
        return f"no NVIDIA GPU on this host ({device} absent)"
    runtimes = (client.info() or {}).get("Runtimes") or {}
    if "nvidia" not in runtimes:
        return "the engine has no nvidia runtime (NVIDIA Container Toolkit not installed)"
    return None


def is_gpu_node(node: PlannedNode) -> bool:
    """The node's profile names an NVIDIA data-centre GPU (``nvidia-t4``,
    ``nvidia-h100``); an embedded one (a Jetson's) stays modelled: the host's card is
    no Jetson."""
    return (node.profile.accelerator or "").startswith("nvidia")


def gpu_nodes(plan: Plan) -> list[PlannedNode]:
    """The nodes :func:`is_gpu_node` picks."""
    return [n for n in plan.nodes if is_gpu_node(n)]


def gpu_request(node: PlannedNode, unavailable: str | None) -> dict[str, Any]:
    """Container keyword arguments giving ``node`` the host's GPUs (empty: none)."""
    if unavailable is not None or not is_gpu_node(node):
        return {}
    import docker as sdk

    return {"device_requests": [sdk.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]}


def gpu_note(plan: Plan, unavailable: str | None) -> str | None:
    """The summary's ``gpu`` line (None: no node has an accelerator)."""
    nodes = [n.name for n in gpu_nodes(plan)]
    if not nodes:
        return None
    which = ", ".join(nodes)
    if unavailable is None:
        return f"host NVIDIA GPUs passed through to {which} (measured on the real device)"
    return f"emulated for {which}: {unavailable} (the profiles' accelerators are modelled)"
