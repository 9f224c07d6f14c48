"""A run's time-dilation factor: chosen from the spec, checked, recorded.

``time_dilation`` in the spec is a number (1: no dilation, the default) or ``auto``: the
speed of the fastest device profile of the fleet, so that every device, that one
included, runs at its profile's speed (:mod:`kernel.dilation` says what a factor does).
A workload runs dilated only if its section's model declares ``dilated_clock = True``
(every clock it keeps goes through :mod:`kernel.dilation`); others are refused at
``validate`` naming ``time_dilation``. The simulation backend prices compute on a
virtual clock, where a fast device needs no dilation: it does not read the field, and
says so (:meth:`Backend.ignored`).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.spec.catalog import DeviceProfile
from testbed.spec.models import Experiment

__all__ = ["Dilation", "host_speed_profiles", "resolve", "unsupported"]


@dataclass(frozen=True)
class Dilation:
    """The factor a run uses and why.

    Attributes
    ----------
    tdf
        Every emulated second lasts ``tdf`` wall seconds (1: none).
    chosen
        ``"auto"`` or ``"spec"`` (a number in the spec).
    fastest
        The fleet's fastest profile and its speed relative to this host.
    """

    tdf: float
    chosen: str
    fastest: tuple[str, float]

    def record(self) -> dict[str, object]:
        """The ``time_dilation`` event's fields (and the run summary's)."""
        return {
            "tdf": self.tdf,
            "chosen": self.chosen,
            "fastest_profile": self.fastest[0],
            "fastest_speed": self.fastest[1],
        }


def _profiles(exp: Experiment) -> dict[str, float]:
    """Profile name -> speed of every profile a fleet node may draw."""
    out: dict[str, float] = {}
    for node in exp.fleet.nodes if exp.fleet else ():
        names: list[str | DeviceProfile] = [*sorted(node.profile_mix)] or [node.profile]
        for name in names:
            prof = exp.profile_of(node.model_copy(update={"profile": name}))
            label = name if isinstance(name, str) else f"{node.id} (inline)"
            out[label] = prof.cpu_speed_factor
    return out


def resolve(exp: Experiment) -> Dilation:
    """The factor ``exp`` asks for (``auto``: the fastest profile's speed, at least 1)."""
    speeds = _profiles(exp) or {"host": 1.0}
    fastest = max(speeds.items(), key=lambda kv: (kv[1], kv[0]))
    if exp.time_dilation == "auto":
        return Dilation(round(max(1.0, fastest[1]), 6), "auto", fastest)
    return Dilation(float(exp.time_dilation), "spec", fastest)


def host_speed_profiles(exp: Experiment, tdf: float) -> dict[str, float]:
    """Profiles faster than ``tdf`` x this host: they run at ``tdf`` x host speed, not at
    their own (their compute cannot be stretched to a shorter time)."""
    return {n: s for n, s in sorted(_profiles(exp).items()) if s > tdf}


def unsupported(exp: Experiment) -> list[str]:
    """Workload sections of ``exp`` that do not run on a dilated clock (their section
    model does not declare ``dilated_clock``)."""
    sections = exp.workload.sections
    return [s for s in sections if not getattr(getattr(exp.workload, s), "dilated_clock", False)]
