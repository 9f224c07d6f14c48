"""TT-Edge: tensor-train compression of models on the node, and compressed FL uplinks.

Implements issue 5 (arXiv 2511.13738, Kwak et al.): TT-SVD (Oseledets 2011) with SVD
back-ends (LAPACK via ``torch.linalg.svd``; the exact Gram-matrix SVD, the default; a
randomized SVD; a two-phase Householder + implicit-QR SVD, compiled, with its torch
reference), tensorization of Conv2d/Linear layers, TT layers for fine-tuning, a
*modelled* cost model of the TTD engine, and an FL uplink codec.

Modules (import them explicitly; this package imports nothing at import time):

- ``nodes.compression.config``: ``CompressSpec`` (pydantic only).
- ``nodes.compression.svd``: SVD back-ends and per-phase counters.
- ``nodes.compression.tt``: TT-SVD, TT tensors, TT-matrix format.
- ``nodes.compression.tensorize``: layer weight <-> tensor shapes.
- ``nodes.compression.layers``: compress any ``nn.Module`` into TT layers.
- ``nodes.compression.cost_model``: MODELLED engine time/energy.
- ``nodes.compression.codec``: ``encode_update`` / ``decode_update`` for FL uplinks.
- ``nodes.compression.experiment``: ``run_compress`` (the ``compress`` workload).
- ``nodes.compression.bidiag`` / ``bdsqr``: the two phases of the ``two_phase`` SVD.
- ``nodes.compression.resnet`` (ResNet-32), ``train`` (digits CNN, training loops),
  ``data`` (sklearn digits, local CIFAR-10 batches).

``python -m nodes.compression experiments/tt_edge.yaml`` runs the workload stand-alone.
"""
