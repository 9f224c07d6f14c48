"""Builders of the registered semantic-multiplexing schemes (``radio.scheme_registry``).

A builder maps ``(spec, tasks, channel)`` to an untrained system:

==================  ==========================================================  ===========
name                what                                                        channel uses
==================  ==========================================================  ===========
semantic_mux        per-task encoders, bindings summed into ONE block            L
joint_encoder       one encoder over all K inputs, same block and receiver       L
orthogonal_equal    the same S x L block split orthogonally, S*L/K REs per task  L
orthogonal          one stream of L_a uses per task, streams then time slots     ceil(K/S) L_a
bit_level           quantise, 5G LDPC, QAM, LMMSE, decode                        from the code
==================  ==========================================================  ===========
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from radio.config import SemanticMuxSpec

__all__ = ["BUILTIN", "build_scheme"]


def _dims(tasks: list[Any]) -> tuple[list[int], list[int]]:
    return [t.input_dim for t in tasks], [t.num_classes for t in tasks]


def _semantic_mux(spec: SemanticMuxSpec, tasks: list[Any], channel: Any) -> Any:
    from radio.semantic import SemanticMuxSystem

    dims, cls = _dims(tasks)
    return SemanticMuxSystem(dims, cls, spec.latent_dim, spec.hidden_dim, spec.num_tx_antennas,
                             spec.mux_channel_uses, spec.vib_beta > 0, channel)


def _joint_encoder(spec: SemanticMuxSpec, tasks: list[Any], channel: Any) -> Any:
    from radio.block_baselines import JointEncoderSystem

    dims, cls = _dims(tasks)
    return JointEncoderSystem(dims, cls, spec.latent_dim, spec.hidden_dim,
                              spec.num_tx_antennas, spec.mux_channel_uses, spec.vib_beta > 0,
                              channel)


def _orthogonal_equal(spec: SemanticMuxSpec, tasks: list[Any], channel: Any) -> Any:
    from radio.block_baselines import OrthogonalBlockSystem

    dims, cls = _dims(tasks)
    return OrthogonalBlockSystem(dims, cls, spec.latent_dim, spec.hidden_dim,
                                 spec.num_tx_antennas, spec.mux_channel_uses,
                                 spec.vib_beta > 0, channel)


def _orthogonal(spec: SemanticMuxSpec, tasks: list[Any], channel: Any) -> Any:
    from radio.baselines import OrthogonalStreamsSystem

    dims, cls = _dims(tasks)
    return OrthogonalStreamsSystem(dims, cls, spec.latent_dim, spec.hidden_dim,
                                   spec.num_tx_antennas, spec.orthogonal_channel_uses_per_task,
                                   spec.vib_beta > 0, channel)


def _bit_level(spec: SemanticMuxSpec, tasks: list[Any], channel: Any) -> Any:
    from radio.baselines import BitLevelSystem

    dims, cls = _dims(tasks)
    b = spec.bit_baseline
    return BitLevelSystem(dims, cls, b.feature_dim, spec.hidden_dim, b.quantization_bits,
                          b.ldpc_code_rate, b.qam_bits_per_symbol, b.ldpc_num_iterations,
                          spec.num_tx_antennas, channel)


#: Registered as ``radio.schemes:BUILTIN.<name>`` in ``radio/scheme_registry.py``.
BUILTIN = SimpleNamespace(
    semantic_mux=_semantic_mux,
    joint_encoder=_joint_encoder,
    orthogonal_equal=_orthogonal_equal,
    orthogonal=_orthogonal,
    bit_level=_bit_level,
)


def build_scheme(name: str, spec: SemanticMuxSpec, tasks: list[Any], channel: Any) -> Any:
    """Build the registered scheme ``name`` for ``tasks`` on ``channel`` (untrained)."""
    from radio.scheme_registry import SCHEMES

    return SCHEMES[name](spec, tasks, channel)
