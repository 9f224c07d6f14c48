"""GPU profiles on the docker backend (testbed/backends/gpu.py): which containers get the
host's NVIDIA GPUs, and what the run says when it has none. No engine or GPU needed: the
engine's answer and the device node are stand-ins; the CUDA path itself is not tested
here (no GPU on this machine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.backends.gpu import gpu_nodes, gpu_note, gpu_request, gpu_unavailable
from testbed.planner import make_plan
from testbed.spec.loader import parse_spec

SPEC = """\
name: gpus
fleet:
  nodes:
    - {id: cloud, tier: cloud, profile: cloud-gpu}
    - {id: fog, tier: fog, profile: fog-gpu}
    - {id: jet, tier: edge, profile: jetson-orin-nano}
    - {id: pi, tier: edge, profile: rpi5}
workload:
  fl: {rounds: 1}
"""


class Engine:
    """What ``docker.DockerClient.info()`` says about the runtimes."""

    def __init__(self, runtimes: dict[str, Any]) -> None:
        self.runtimes = runtimes

    def info(self) -> dict[str, Any]:
        return {"Runtimes": self.runtimes}


def test_only_nvidia_profiles_get_the_hosts_gpus_when_it_has_them(tmp_path: Path) -> None:
    plan = make_plan(parse_spec(SPEC))
    assert [n.name for n in gpu_nodes(plan)] == ["cloud", "fog"]  # a Jetson stays modelled
    device = tmp_path / "nvidia0"
    no_device = gpu_unavailable(Engine({"nvidia": {}}), device)  # type: ignore[arg-type]
    assert no_device is not None and "no NVIDIA GPU on this host" in no_device
    device.touch()
    no_runtime = gpu_unavailable(Engine({"runc": {}}), device)  # type: ignore[arg-type]
    assert no_runtime is not None and "no nvidia runtime" in no_runtime
    assert gpu_unavailable(Engine({"nvidia": {}, "runc": {}}), device) is None  # type: ignore[arg-type]

    by_name = {n.name: n for n in plan.nodes}
    (req,) = gpu_request(by_name["cloud"], None)["device_requests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
    assert gpu_request(by_name["jet"], None) == {} and gpu_request(by_name["pi"], None) == {}
    assert gpu_request(by_name["cloud"], no_device) == {}  # no GPU: nothing requested

    assert gpu_note(plan, None) == (
        "host NVIDIA GPUs passed through to cloud, fog (measured on the real device)"
    )
    note = gpu_note(plan, no_device)
    assert note is not None and note.startswith("emulated for cloud, fog: no NVIDIA GPU")
    assert gpu_note(make_plan(parse_spec(SPEC.replace("cloud-gpu", "host").replace(
        "fog-gpu", "host"))), None) is None  # fmt: skip
