"""Names of the semantic-multiplexing schemes (no torch: ``radio/config.py`` imports it).

Every scheme is a builder registered by dotted path into ``radio/schemes.py`` and imported
when first built; a user scheme is any ``package.module:builder`` with the signature
``builder(spec, tasks, channel) -> Block`` whose system has ``transmit``, ``propagate``,
``receive``, ``channel_uses`` and ``active_streams`` like the built-in ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernel.registry import Registry, callable_hook

SchemeBuilder = Callable[[Any, list[Any], Any], Any]

#: The built-in schemes, in the order the tables list them. ``semantic_mux`` is the scheme
#: under study; the others are its baselines (ratios are baseline / semantic_mux).
BUILTIN_SCHEMES: tuple[str, ...] = (
    "semantic_mux",
    "joint_encoder",
    "orthogonal_equal",
    "orthogonal",
    "bit_level",
)

#: name (or ``package.module:builder``) -> builder(spec, tasks, channel) -> system
SCHEMES: Registry[SchemeBuilder] = Registry(
    "semantic-mux scheme", validate=callable_hook("(spec, tasks, channel) -> system Block")
)
for _name in BUILTIN_SCHEMES:
    SCHEMES.add_path(_name, f"radio.schemes:BUILTIN.{_name}")
