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
