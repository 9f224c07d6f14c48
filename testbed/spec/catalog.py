"""Built-in device profiles.

Figures are vendor specifications or published benchmarks; the ``source`` of each
says where. ``cpu_speed_factor`` is single-thread speed relative to THIS host
(a 2-core x86-64 cloud VM, factor 1.0): a MODEL, estimated from Geekbench 6 single-core
scores relative to a ~1,700-point cloud vCPU; the emulator stretches compute time by
``1 / cpu_speed_factor``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DeviceProfile(BaseModel):
    """A device class a node emulates."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_speed_factor: float = Field(1.0, gt=0, description="compute speed vs this host")
    cpu_cores: int = Field(1, ge=1)
    memory_mb: int = Field(2048, gt=0)
    accelerator: str | None = None
    uplink_mbps: float = Field(100.0, gt=0)
    power_w: float = Field(10.0, gt=0, description="typical active power, watts (modelled)")
    source: str = "user-defined"


CATALOG: dict[str, DeviceProfile] = {
    "host": DeviceProfile(
        cpu_speed_factor=1.0,
        cpu_cores=2,
        memory_mb=24576,
        uplink_mbps=10000,
        power_w=65,
        source="this machine (2 cores, 24 GB); speed factor 1 by definition",
    ),
    "jetson-orin-nano": DeviceProfile(
        cpu_speed_factor=0.55,
        cpu_cores=6,
        memory_mb=8192,
        accelerator="ampere-1024-cuda",
        uplink_mbps=1000,
        power_w=15,
        source="NVIDIA Jetson Orin Nano 8GB datasheet (6x Cortex-A78AE 1.7 GHz, 8 GB, "
        "7-15 W); speed factor from Geekbench 6 single-core ~950 vs host ~1700",
    ),
    "rpi5": DeviceProfile(
        cpu_speed_factor=0.5,
        cpu_cores=4,
        memory_mb=8192,
        uplink_mbps=1000,
        power_w=7,
        source="Raspberry Pi 5 product brief (4x Cortex-A76 2.4 GHz, up to 8 GB, GbE); "
        "Geekbench 6 single-core ~850; ~7 W under load (Jeff Geerling measurements)",
    ),
    "fog-server": DeviceProfile(
        cpu_speed_factor=1.2,
        cpu_cores=16,
        memory_mb=65536,
        uplink_mbps=10000,
        power_w=200,
        source="typical 1U edge server (e.g. Intel Xeon D / Dell PowerEdge XR); "
        "Geekbench 6 single-core ~2000",
    ),
    "cloud-gpu": DeviceProfile(
        cpu_speed_factor=1.3,
        cpu_cores=32,
        memory_mb=262144,
        accelerator="nvidia-h100",
        uplink_mbps=25000,
        power_w=700,
        source="cloud GPU VM (e.g. AWS p5 slice: Xeon Sapphire Rapids, H100 700 W TDP)",
    ),
    "leo-sat": DeviceProfile(
        cpu_speed_factor=0.25,
        cpu_cores=4,
        memory_mb=4096,
        uplink_mbps=100,
        power_w=10,
        source="LEO on-board computer class (e.g. Unibap iX5 / Xiphos Q8: quad ARM, "
        "4 GB, 5-15 W); S/X-band downlink ~100 Mbps",
    ),
}
