"""Every strategy offered by name does what its paper says, on both sides (issue 14).

Each test runs the strategy from the testbed's registry, built the way the ServerApp
builds it (``constructor_args``), against the testbed's real ClientApp in process
(``tests/fl/federation.py``), and checks the global model against the paper's update
rule computed here independently from the replies. Round-1 replies do not depend on the
strategy (same initial model, same seeds), so two strategies can be compared exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from federation import Federation, Reply, distance, run_federation

from nodes.device_control import NodeControl, write_control
from nodes.fl import task
from nodes.fl.config import FLSpec, StrategySpec
from nodes.fl.recording import RecordingStrategy
from nodes.fl.strategies import GLOBAL_LOSS, STRATEGIES, constructor_args
from nodes.fl.telemetry import Telemetry

Model = dict[str, np.ndarray]

SPEC = FLSpec.model_validate(
    {"partitioner": {"name": "dirichlet", "alpha": 0.5}, "local_epochs": 2, "rounds": 2}
)
EXACT = 1e-5  # named tolerance: float32 models, aggregation done in float64 or float32
PROX_SHRINK = 0.5  # FedProx with a large mu: local models at most half as far as FedAvg's


def build(name: str, **params: object) -> object:
    """The strategy as the ServerApp builds it for a fleet of 3 (or ``n``) clients."""
    n = int(str(params.pop("n", 3)))
    args = constructor_args(name, params, SPEC.model_dump(), n)
    return STRATEGIES[name](**args)


def run(name: str, n: int = 3, **params: object) -> Federation:
    return run_federation(build(name, n=n, **params), SPEC, num_nodes=n)  # type: ignore[arg-type]


def fedavg(replies: list[Reply]) -> Model:
    """Weighted mean of the replies' models (weights: num-examples)."""
    w = np.array([r.metrics["num-examples"] for r in replies])
    models = [r.weights for r in replies]
    return {k: sum(wi * m[k] for wi, m in zip(w, models, strict=True)) / w.sum() for k in models[0]}


def close(a: Model, b: Model, tol: float = EXACT) -> bool:
    return all(np.allclose(a[k], b[k], atol=tol, rtol=1e-4) for k in a)


@pytest.fixture(scope="module")
def avg() -> Federation:
    return run("fedavg")


def test_fedavg_is_the_weighted_mean(avg: Federation) -> None:
    assert close(avg.globals[1], fedavg(avg.train_replies(1)))


def test_fedprox_client_adds_the_proximal_term(avg: Federation) -> None:
    prox = run("fedprox", proximal_mu=1.0)
    d_avg = [distance(r.weights, avg.globals[0]) for r in avg.train_replies(1)]
    d_prox = [distance(r.weights, prox.globals[0]) for r in prox.train_replies(1)]
    assert max(d_prox) < PROX_SHRINK * min(d_avg), (d_prox, d_avg)
    assert close(prox.globals[1], fedavg(prox.train_replies(1)))  # server side: FedAvg


def test_fedprox_mu_zero_trains_like_fedavg(avg: Federation) -> None:
    prox = run("fedprox", proximal_mu=0.0)
    by_pid = {r.pid: r for r in avg.train_replies(1)}
    for r in prox.train_replies(1):
        assert close(r.weights, by_pid[r.pid].weights, 0.0)


def test_fedavgm_adds_server_momentum(avg: Federation) -> None:
    beta = 0.9
    m = run("fedavgm", server_momentum=beta)
    g0, g1 = avg.globals[0], avg.globals[1]
    assert close(m.globals[1], g1)  # round 1: momentum buffer = first pseudo-gradient
    # round 2: x2 = x1 - (beta * (x0 - x1) + (x1 - fedavg_2)) = fedavg_2 - beta * (x0 - x1)
    want = {k: avg.globals[2][k] - beta * (g0[k] - g1[k]) for k in g0}
    assert close(m.globals[2], want)


def test_diloco_takes_outer_nesterov_steps(avg: Federation) -> None:
    """Round 1: v = d, x1 = x0 - eta (1 + beta) d; round 2 from the FedAvg aggregate of
    round 2's local models (trained from x1, so compared with the run's own replies)."""
    eta, beta = 0.7, 0.9
    dl = run("diloco")
    x0 = dl.globals[0]
    d1 = {k: x0[k] - fedavg(dl.train_replies(1))[k] for k in x0}
    x1 = {k: x0[k] - eta * (1 + beta) * d1[k] for k in x0}
    assert close(dl.globals[1], x1, 1e-4)
    d2 = {k: x1[k] - fedavg(dl.train_replies(2))[k] for k in x0}
    v2 = {k: beta * d1[k] + d2[k] for k in x0}
    x2 = {k: x1[k] - eta * (d2[k] + beta * v2[k]) for k in x0}
    assert close(dl.globals[2], x2, 1e-4)
    assert not close(dl.globals[1], avg.globals[1], 1e-3)  # not FedAvg


def _adaptive(name: str, v: Callable[[np.ndarray], np.ndarray], b1: float) -> None:
    """Round 1 of Reddi et al. 2021, Alg. 2: x1 = x0 + eta * m / (sqrt(v) + tau)."""
    eta, tau = 0.1, 1e-3
    fed = run(name, eta=eta, tau=tau)
    x0 = fed.globals[0]
    d = {k: fedavg(fed.train_replies(1))[k] - x0[k] for k in x0}
    want = {k: x0[k] + eta * (1 - b1) * d[k] / (np.sqrt(v(d[k])) + tau) for k in x0}
    assert close(fed.globals[1], want, 1e-4)
    assert not close(fed.globals[1], fedavg(fed.train_replies(1)), 1e-3)


def test_fedadam_follows_the_paper() -> None:
    _adaptive("fedadam", lambda d: (1 - 0.99) * d**2, b1=0.9)


def test_fedyogi_follows_the_paper() -> None:
    _adaptive("fedyogi", lambda d: (1 - 0.99) * d**2, b1=0.9)  # v0 = 0: sign(0 - d^2) = -1


def test_fedadagrad_follows_the_paper() -> None:
    _adaptive("fedadagrad", lambda d: d**2, b1=0.0)


def test_fedopt_clients_train_at_the_spec_learning_rate() -> None:
    assert build("fedadam").eta_l == SPEC.lr  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="workload.fl.lr"):
        StrategySpec(name="fedyogi", params={"eta_l": 0.5})


def test_qfedavg_clients_report_the_global_models_loss() -> None:
    fed = run("qfedavg", q=2.0)
    splits = task.get_splits(SPEC, 3, 3)
    model = task.make_model(SPEC, splits)
    model.load_state_dict({k: __import__("torch").from_numpy(v) for k, v in fed.globals[0].items()})
    for r in fed.train_replies(1):
        pid = r.pid
        want = task.evaluate(model, splits.silo_train[pid])[0]
        assert r.metrics[GLOBAL_LOSS] == pytest.approx(want, abs=EXACT)


def _qffl(x0: Model, replies: list[Reply], q: float, lr: float) -> Model:
    """Li et al. 2020 (q-FFL), Alg. 2: x1 = x0 - sum(Delta_k) / sum(h_k), L = 1 / lr."""
    lip = 1.0 / lr
    num = {k: np.zeros_like(v, dtype=np.float64) for k, v in x0.items()}
    den = 0.0
    for r in replies:
        f = r.metrics[GLOBAL_LOSS] + 1e-10
        g = {k: lip * (x0[k] - r.weights[k]) for k in x0}
        for k in x0:
            num[k] += f**q * g[k]
        den += q * f ** (q - 1) * sum(float(np.sum(v**2)) for v in g.values()) + lip * f**q
    return {k: x0[k] - num[k] / den for k in x0}


def test_qfedavg_weighs_updates_by_loss_to_the_q() -> None:
    fair, plain = run("qfedavg", q=5.0), run("qfedavg", q=0.0)
    x0, replies = fair.globals[0], fair.train_replies(1)
    assert close(fair.globals[1], _qffl(x0, replies, 5.0, SPEC.lr), 1e-4)
    # q = 0: the unweighted mean of the local models
    mean = {k: np.mean([r.weights[k] for r in plain.train_replies(1)], axis=0) for k in x0}
    assert close(plain.globals[1], mean, 1e-4)
    # the silo the global model serves worst pulls the update its way harder under q = 5
    worst = max(replies, key=lambda r: r.metrics[GLOBAL_LOSS])
    toward = _cosine(_minus(fair.globals[1], x0), _minus(worst.weights, x0))
    assert toward > _cosine(_minus(plain.globals[1], x0), _minus(worst.weights, x0))


def _minus(a: Model, b: Model) -> np.ndarray:
    return np.concatenate([(a[k] - b[k]).ravel() for k in sorted(a)])


def _cosine(u: np.ndarray, v: np.ndarray) -> float:
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def test_fedmedian_is_the_coordinatewise_median(avg: Federation) -> None:
    fed = run("fedmedian")
    models = [r.weights for r in fed.train_replies(1)]
    want = {k: np.median([m[k] for m in models], axis=0) for k in models[0]}
    assert close(fed.globals[1], want)
    assert not close(fed.globals[1], avg.globals[1], 1e-3)


def test_fedtrimmedavg_drops_the_extremes_per_coordinate() -> None:
    fed = run("fedtrimmedavg", n=4, beta=0.25)
    models = [r.weights for r in fed.train_replies(1)]
    want = {k: np.sort([m[k] for m in models], axis=0)[1:3].mean(axis=0) for k in models[0]}
    assert close(fed.globals[1], want)


@pytest.fixture(scope="module")
def byzantine(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """Node config making silo 0 send its update plus Gaussian noise of std 1."""
    path = tmp_path_factory.mktemp("byz") / "control.json"
    write_control(path, NodeControl(misconfig="noise", factor=1.0))
    return {0: {"control-path": str(path)}}


Config = dict[int, dict[str, str]]


def _with(name: str, n: int, node_config: Config, **params: object) -> Federation:
    # the recording wrapper, as in the ServerApp: it lets replies with extra keys through
    names = [f"silo-{i}" for i in range(n)]
    strategy = RecordingStrategy(build(name, n=n, **params), Telemetry(None), names, 2, "separate")
    return run_federation(strategy, SPEC, num_nodes=n, node_config=node_config)  # type: ignore[arg-type]


def test_krum_picks_the_update_nearest_its_neighbours(byzantine: Config) -> None:
    n, f = 5, 1
    fed = _with("krum", n, byzantine, num_malicious_nodes=f)
    models = [r.weights for r in fed.train_replies(1)]
    flat = np.stack([np.concatenate([m[k].ravel() for k in sorted(m)]) for m in models])
    d2 = ((flat[:, None, :] - flat[None, :, :]) ** 2).sum(-1)
    scores = [np.sort(np.delete(d2[i], i))[: n - f - 2].sum() for i in range(n)]
    best = int(np.argmin(scores))
    assert close(fed.globals[1], models[best])
    pids = [r.pid for r in fed.train_replies(1)]
    assert pids[best] != 0  # never the noisy silo


def test_multikrum_averages_the_selected_updates(byzantine: Config) -> None:
    fed = _with("multikrum", 5, byzantine, num_malicious_nodes=1, num_nodes_to_select=3)
    replies = fed.train_replies(1)
    noisy = [r.pid for r in replies].index(0)
    honest = [r for i, r in enumerate(replies) if i != noisy]
    d_noisy = distance(fed.globals[1], replies[noisy].weights)
    assert d_noisy > 10 * max(distance(fed.globals[1], r.weights) for r in honest)


def test_bulyan_resists_a_byzantine_silo(byzantine: Config) -> None:
    n = 7
    byz = _with("bulyan", n, byzantine, num_malicious_nodes=1)
    plain = _with("fedavg", n, byzantine)
    honest = fedavg([r for r in byz.train_replies(1) if r.pid != 0])
    assert distance(byz.globals[1], honest) < 0.2 * distance(plain.globals[1], honest)


@pytest.mark.parametrize(
    ("name", "f", "n_min"), [("krum", 1, 5), ("multikrum", 2, 7), ("bulyan", 1, 7)]
)
def test_byzantine_strategies_refuse_too_small_fleets(name: str, f: int, n_min: int) -> None:
    build(name, n=n_min, num_malicious_nodes=f)
    with pytest.raises(ValueError, match=rf"{name} with num_malicious_nodes={f} needs"):
        build(name, n=n_min - 1, num_malicious_nodes=f)


def test_every_registered_strategy_has_a_test_here() -> None:
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    assert [n for n in STRATEGIES.names() if f'"{n}"' not in source] == []
