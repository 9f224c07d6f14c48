"""Built-in device profiles.

Figures are vendor specifications or published benchmarks; the ``source`` of each
says where. ``cpu_speed_factor`` is single-thread speed relative to THIS host
(a 2-core x86-64 cloud VM, factor 1.0): a MODEL, estimated from Geekbench 6 single-core
scores relative to a ~1,700-point cloud vCPU; the emulator stretches compute time by
``1 / cpu_speed_factor``.

GPU fields (``gpu_*``) are a MODEL for the emulated GPU backend of the function runtime:
accelerable (CPU) time is divided by ``gpu_fp32_tflops * gpu_efficiency`` over this
host's single-thread FP32 matmul throughput per CPU second, measured at the start of
each run (about 100-190 GFLOPS here), plus ``gpu_overhead_ms`` per request. Peak
figures are datasheet values; efficiency, overhead and cold start are assumptions,
labelled as such. H100: ``gpu_slots=4`` stands for MIG-style sharing.
"""

from __future__ import annotations

from pydantic import Field

from kernel.frozen import Frozen


class DeviceProfile(Frozen):
    """A device class a node emulates."""

    cpu_speed_factor: float = Field(1.0, gt=0, description="compute speed vs this host")
    cpu_cores: int = Field(1, ge=1)
    memory_mb: int = Field(2048, gt=0)
    accelerator: str | None = None
    uplink_mbps: float = Field(100.0, gt=0)
    power_w: float = Field(10.0, gt=0, description="typical active power, watts (modelled)")
    gpu_fp32_tflops: float | None = Field(
        None, gt=0, description="accelerator peak FP32 throughput (datasheet); None = no GPU"
    )
    gpu_efficiency: float = Field(
        0.25, gt=0, le=1, description="fraction of peak a serving kernel reaches (modelled)"
    )
    gpu_overhead_ms: float = Field(
        1.0, ge=0, description="per-request launch + host<->device copy time (modelled)"
    )
    gpu_cold_start_s: float = Field(
        2.0, ge=0, description="CUDA context + model upload on a GPU backend start (modelled)"
    )
    gpu_slots: int = Field(1, ge=0, description="functions that may hold this GPU at once")
    source: str = "user-defined"

    @property
    def has_gpu(self) -> bool:
        return self.gpu_fp32_tflops is not None and self.gpu_slots > 0

    @property
    def usable_gpu_slots(self) -> int:
        """GPU slots functions may hold (0 without a GPU)."""
        return self.gpu_slots if self.has_gpu else 0


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
        gpu_fp32_tflops=1.28,
        gpu_overhead_ms=2.0,
        gpu_cold_start_s=3.0,
        source="NVIDIA Jetson Orin Nano 8GB datasheet (6x Cortex-A78AE 1.7 GHz, 8 GB, "
        "7-15 W; 1024-core Ampere GPU at 625 MHz = 1.28 TFLOPS FP32); speed factor from "
        "Geekbench 6 single-core ~950 vs host ~1700",
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
    "fog-gpu": DeviceProfile(
        cpu_speed_factor=1.2,
        cpu_cores=16,
        memory_mb=65536,
        accelerator="nvidia-t4",
        uplink_mbps=10000,
        power_w=270,
        gpu_fp32_tflops=8.1,
        gpu_overhead_ms=1.0,
        gpu_cold_start_s=2.5,
        source="fog-server CPU plus an NVIDIA T4 (datasheet: 8.1 TFLOPS FP32, 70 W)",
    ),
    "cloud-gpu": DeviceProfile(
        cpu_speed_factor=1.3,
        cpu_cores=32,
        memory_mb=262144,
        accelerator="nvidia-h100",
        uplink_mbps=25000,
        power_w=700,
        gpu_fp32_tflops=67.0,
        gpu_overhead_ms=0.5,
        gpu_cold_start_s=4.0,
        gpu_slots=4,
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
