"""Strategies offered by name, and user strategy classes by dotted path.

``workload.fl.strategy.name`` is a name of :data:`STRATEGIES` or ``package.module:Class``
naming a subclass of ``flwr.serverapp.strategy.Strategy`` (imported and checked when
the spec is loaded). Built-ins are registered as dotted paths, so validating a spec
imports no Flower code unless parameters must be checked.

What each built-in does on both sides (the paper's algorithm, issue 14):

==============  ==================================================================
name            server (Flower class)                client (``nodes/fl/task.py``)
==============  ==================================================================
fedavg          weighted mean (McMahan 2017)          local SGD/Adam
fedprox         FedAvg; sends ``proximal-mu``         adds (mu/2)||w - w_global||^2
fedadam,        server Adam/Adagrad/Yogi on the       local SGD at ``workload.fl.lr``
fedadagrad,     pseudo-gradient (Reddi 2021, no       (= the paper's eta_l, filled
fedyogi         bias correction: testbed FedAdam)     in by the ServerApp)
fedavgm         server momentum (Hsu 2019)            local SGD
fedmedian       coordinate-wise median (Yin 2018)     local SGD
fedtrimmedavg   coordinate-wise trimmed mean          local SGD
krum,           Krum / Multi-Krum (Blanchard 2017):   local SGD
multikrum       needs n >= 2f + 3 clients
bulyan          Bulyan (El Mhamdi 2018):              local SGD
                needs n >= 4f + 3 clients
qfedavg         q-FFL (Li 2020), L = 1/lr, weighted   reports F_k(w_global): the loss
                by F_k(w_global)^q                    of the received model on its
                                                      training data (``global-loss``)
diloco          outer Nesterov momentum on the        many local steps (local_epochs;
                pseudo-gradient, eta 0.7, beta 0.9    adam as the inner AdamW stand-in)
                (Douillard 2023)
==============  ==================================================================
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from kernel.registry import Registry

_FLWR = "flwr.serverapp.strategy"

#: Train-config key of FedProx's mu (set by Flower's FedProx.configure_train).
PROXIMAL_MU = "proximal-mu"
#: Train-config key asking the client for the received model's loss on its training data.
REPORT_GLOBAL_LOSS = "report-global-loss"
#: Metric key of that loss (F_k(w^t) in Li et al. 2020), measured before local training.
GLOBAL_LOSS = "global-loss"


def _strategy_class(obj: object) -> type:
    """Accept a subclass of ``flwr.serverapp.strategy.Strategy`` (user hooks)."""
    from flwr.serverapp.strategy.strategy import Strategy

    if not (isinstance(obj, type) and issubclass(obj, Strategy)):
        raise TypeError(f"must be a subclass of {_FLWR}.Strategy, got {obj!r}")
    return obj


#: name -> strategy class (``flwr.serverapp.strategy`` classes and testbed subclasses).
STRATEGIES: Registry[type] = Registry("strategy", validate=_strategy_class)
for _name, _cls in {
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "fedadagrad": "FedAdagrad",
    "fedyogi": "FedYogi",
    "fedavgm": "FedAvgM",
    "fedmedian": "FedMedian",
    "fedtrimmedavg": "FedTrimmedAvg",
    "krum": "Krum",
    "multikrum": "MultiKrum",
    "bulyan": "Bulyan",
}.items():
    STRATEGIES.add_path(_name, f"{_FLWR}:{_cls}")
STRATEGIES.add_path("qfedavg", "nodes.fl.paper_strategies:QFedAvg")
STRATEGIES.add_path("fedadam", "nodes.fl.paper_strategies:FedAdam")
STRATEGIES.add_path("diloco", "nodes.fl.paper_strategies:DiLoCo")

#: Constructor parameters the ServerApp fills from ``workload.fl`` (clients use them).
FROM_FL_SPEC: dict[str, str] = {
    "eta_l": "lr",  # FedOpt family: the clients' learning rate
    "client_learning_rate": "lr",  # q-FedAvg: L = 1 / lr
}
#: Minimum number of clients n for f assumed malicious ones: n >= a * f + b.
BYZANTINE_BOUND: dict[str, tuple[int, int]] = {
    "krum": (2, 3),
    "multikrum": (2, 3),
    "bulyan": (4, 3),
}


def init_params(cls: type) -> list[str]:
    """Keyword parameters of ``cls``'s constructor, following ``**kwargs`` to its bases."""
    names: list[str] = []
    for base in cls.__mro__:
        if "__init__" not in vars(base):
            continue
        params = inspect.signature(vars(base)["__init__"]).parameters.values()
        names += [p.name for p in params if p.name != "self" and p.kind in _NAMED]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return sorted(set(names))


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def check_params(name: str, params: Mapping[str, object]) -> None:
    """Raise ValueError if ``params`` are not constructor parameters the user may set.

    Parameters
    ----------
    name : str
        A registered name or ``package.module:Class``.
    params : mapping
        ``workload.fl.strategy.params``.
    """
    allowed = [p for p in init_params(STRATEGIES[name]) if p not in FROM_FL_SPEC]
    for key in params:
        if key in FROM_FL_SPEC:
            raise ValueError(
                f"{key!r} of {name} is the clients' setting workload.fl.{FROM_FL_SPEC[key]}; "
                "set it there"
            )
    bad = sorted(set(params) - set(allowed))
    if bad:
        raise ValueError(f"unknown parameter(s) {bad} for {name}; allowed: {allowed}")


def constructor_args(
    name: str, params: Mapping[str, object], spec_values: Mapping[str, object], n: int
) -> dict[str, object]:
    """Keyword arguments of the strategy's constructor for a fleet of ``n`` clients.

    Parameters
    ----------
    name : str
        Strategy name or dotted path.
    params : mapping
        The user's ``workload.fl.strategy.params``.
    spec_values : mapping
        ``workload.fl`` values by field name (``lr``, ``min_participants``).
    n : int
        Number of client nodes in the fleet.

    Raises
    ------
    ValueError
        If the fleet is too small for the strategy's assumptions (Krum, Bulyan).
    """
    for err in assumption_errors(name, params, n):
        raise ValueError(err)
    sig = init_params(STRATEGIES[name])
    m = min(int(str(spec_values["min_participants"])), n)
    args: dict[str, object] = {
        k: m for k in ("min_available_nodes", "min_train_nodes", "min_evaluate_nodes")
    }
    args.update({k: spec_values[v] for k, v in FROM_FL_SPEC.items() if k in sig})
    args.update(params)
    return args


def assumption_errors(name: str, params: Mapping[str, object], n: int) -> list[str]:
    """What the strategy's paper assumes about the fleet and ``n`` clients violate."""
    if name not in BYZANTINE_BOUND:
        return []
    a, b = BYZANTINE_BOUND[name]
    f = int(str(params.get("num_malicious_nodes", 0)))
    if n < a * f + b:
        return [
            f"workload.fl.strategy: {name} with num_malicious_nodes={f} needs at least "
            f"{a}*f+{b} = {a * f + b} client nodes; the fleet has {n}"
        ]
    return []
