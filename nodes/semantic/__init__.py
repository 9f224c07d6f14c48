"""Semantic offload on fleet nodes: task encoders on edge devices, channel, demultiplexer
and task heads on a fog node (``workload.semantic_offload``)."""
