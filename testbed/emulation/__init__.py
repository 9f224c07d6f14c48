"""Emulation of what crosses links: shaping proxy (default) and netem mode.

Nothing is imported at package import time; use the submodules:
``testbed.emulation.link`` (LinkParams, LinkSchedule, the Link protocol),
``testbed.emulation.kinds`` (LINK_KINDS: link kinds by name, each building and
pricing its links on every backend),
``testbed.emulation.proxy`` (ShapingProxy, its data path in ``relay``),
``testbed.emulation.netem`` (NetemLink), ``testbed.emulation.schedule``
(ScheduleDriver, shared by every kind) and ``testbed.emulation.state`` (LinkState:
partition and time bookkeeping, shared). See docs/links.md.
"""
