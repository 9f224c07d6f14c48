"""Emulation of what crosses links: shaping proxy (default) and netem mode.

Nothing is imported at package import time; use the submodules:
``testbed.emulation.link`` (LinkParams, LinkSchedule), ``testbed.emulation.proxy``
(ShapingProxy) and ``testbed.emulation.netem`` (NetemLink). See docs/links.md.
"""
