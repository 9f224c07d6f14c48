"""Testbed subclasses of Flower strategies where Flower's class alone does not follow the
paper with the testbed's ClientApp (registered in ``nodes/fl/strategies.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAdam as _FlwrFedAdam
from flwr.serverapp.strategy import FedAvg as _FlwrFedAvg
from flwr.serverapp.strategy import FedAvgM as _FlwrFedAvgM
from flwr.serverapp.strategy import QFedAvg as _FlwrQFedAvg
from flwr.serverapp.strategy.fedopt import FedOpt

from nodes.fl.strategies import GLOBAL_LOSS, REPORT_GLOBAL_LOSS


class QFedAvg(_FlwrQFedAvg):
    """q-FedAvg (Li et al., "Fair Resource Allocation in Federated Learning", ICLR 2020).

    The paper weighs client k's update by ``F_k(w^t)^q``, the loss of the *received*
    global model on k's data. Flower's class reads a training-loss key from the reply;
    here it reads ``global-loss``, which the testbed's client computes (before local
    training) when the train config carries ``report-global-loss``. ``L = 1/lr`` with
    ``client_learning_rate`` filled from ``workload.fl.lr`` by the ServerApp.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("train_loss_key", GLOBAL_LOSS)
        super().__init__(*args, **kwargs)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Ask every client for ``F_k(w^t)`` along with its update."""
        config[REPORT_GLOBAL_LOSS] = True
        msgs: Iterable[Message] = super().configure_train(server_round, arrays, config, grid)
        return msgs


class FedAdam(_FlwrFedAdam):
    """FedAdam as in Reddi et al., "Adaptive Federated Optimization" (ICLR 2021), Alg. 2.

    With the round's FedAvg aggregate ``x'`` and the global model ``x_t``:
    ``d = x' - x_t``, ``m = b1 m + (1 - b1) d``, ``v = b2 v + (1 - b2) d^2``,
    ``x_{t+1} = x_t + eta m / (sqrt(v) + tau)``, with no bias correction (the paper
    has none). Flower 1.41's class multiplies ``eta`` by a bias correction taken at
    step ``server_round + 1`` (0.74 in round 1 with the default betas), so its first
    step is neither the paper's nor Adam's.
    """

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Server Adam step on the FedAvg pseudo-gradient."""
        aggregated, metrics = FedOpt.aggregate_train(self, server_round, replies)
        if aggregated is None:
            return aggregated, metrics
        delta, m_t, _agg = self._compute_deltat_and_mt(aggregated)
        if not self.v_t:
            self.v_t = {k: np.zeros_like(d) for k, d in delta.items()}
        b2 = self.beta_2
        self.v_t = {k: b2 * v + (1 - b2) * delta[k] ** 2 for k, v in self.v_t.items()}
        assert self.current_arrays is not None  # set by configure_train
        new = {
            k: x + self.eta * m_t[k] / (np.sqrt(self.v_t[k]) + self.tau)
            for k, x in self.current_arrays.items()
        }
        return ArrayRecord({k: Array(np.asarray(v)) for k, v in new.items()}), metrics


class DiLoCo(_FlwrFedAvgM):
    """DiLoCo (Douillard et al., "DiLoCo: Distributed Low-Communication Training of
    Language Models", 2023; the nanochat study arXiv 2511.13761).

    Inner optimisation: each client trains many local steps (``workload.fl.local_epochs``
    x its batches, with ``optimizer: adam`` as the paper's AdamW stand-in). Outer
    optimisation, each round: the pseudo-gradient ``d = x_t - mean(local models)``
    (FedAvg's weighted mean), Nesterov momentum as PyTorch's SGD computes it::

        v = beta * v + d          (v = d in the first round)
        x_{t+1} = x_t - eta * (d + beta * v)

    with the paper's defaults ``eta = 0.7`` (``server_learning_rate``) and ``beta = 0.9``
    (``server_momentum``). Flower's FedAvgM is heavy-ball momentum (no Nesterov term).
    """

    def __init__(
        self, server_learning_rate: float = 0.7, server_momentum: float = 0.9, **kwargs: Any
    ) -> None:
        super().__init__(
            server_learning_rate=server_learning_rate, server_momentum=server_momentum, **kwargs
        )
        self.server_opt = True  # always keep the global model: the outer step needs it

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The outer Nesterov step on the FedAvg pseudo-gradient."""
        aggregated, metrics = _FlwrFedAvg.aggregate_train(self, server_round, replies)
        if aggregated is None or self.current_arrays is None:
            return aggregated, metrics
        keys = list(aggregated.keys())
        old = self.current_arrays.to_numpy_ndarrays()
        delta = [o - n for o, n in zip(old, aggregated.to_numpy_ndarrays(), strict=True)]
        beta, eta = self.server_momentum, self.server_learning_rate
        if self.momentum_vector is None:
            self.momentum_vector = delta
        else:
            self.momentum_vector = [
                beta * v + d for v, d in zip(self.momentum_vector, delta, strict=True)
            ]
        new = [
            Array(np.asarray(o - eta * (d + beta * v)))
            for o, d, v in zip(old, delta, self.momentum_vector, strict=True)
        ]
        self.current_arrays = ArrayRecord(dict(zip(keys, new, strict=True)))
        return self.current_arrays, metrics
