"""Testbed subclasses of Flower strategies where Flower's class alone does not follow the
paper with the testbed's ClientApp (registered in ``nodes/fl/strategies.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import QFedAvg as _FlwrQFedAvg

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
