"""Typed, frozen experiment models (pydantic v2). Unknown keys are errors everywhere.

Units are in the names. Workload sections owned by the data plane (``fl``,
``semantic_mux``, ``compress``) are defined beside the code that runs them and
imported here.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kernel.frozen import Frozen
from nodes.compression.config import CompressSpec
from nodes.fl.config import FLSpec
from radio.config import MmwaveLinkSpec, SemanticMuxSpec
from testbed.faults.base import FaultParams
from testbed.functions.config import FunctionsSpec
from testbed.simulation.config import SimulationSpec
from testbed.space.config import SpaceSpec
from testbed.spec.catalog import CATALOG, DeviceProfile

if TYPE_CHECKING:
    from testbed.emulation.link import LinkParams, LinkSchedule

Tier = Literal["edge", "fog", "cloud", "space"]
TIERS: tuple[str, ...] = ("edge", "fog", "cloud", "space")
RADIO_TIERS: tuple[str, ...] = ("edge",)  # tiers whose nodes have a radio (mmwave UE)
NODE_ID = re.compile(r"^[a-z][a-z0-9-]*$")
PLACEMENT_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")  # a swarm node label
MAX_FLEET_NODES = 2_000_000  # nodes of one fleet, replicas included (a million virtual
#                               clients and more fit the simulation backend: docs/simulation.md)
MAX_SEED = 2**32 - 1  # numpy and torch accept every seed up to here (+ repetitions)


class LinkState(Frozen):
    """Properties of an emulated link at one time (each direction)."""

    bandwidth_mbps: float | None = Field(None, gt=0, description="None = unlimited")
    latency_ms: float = Field(0.0, ge=0)
    jitter_ms: float = Field(0.0, ge=0)
    loss_pct: float = Field(0.0, ge=0, lt=100, description="percent (100: use a partition)")
    partitioned: bool = False

    def params(self) -> LinkParams:
        """As the link layer's ``LinkParams`` (its fields, whatever else the model has)."""
        from testbed.emulation.link import LinkParams

        return LinkParams.from_dict(self.model_dump(include=set(LinkParams.field_names())))


class LinkSegment(LinkState):
    """From ``at_s`` seconds after the fleet is ready, the link has these properties."""

    at_s: float = Field(ge=0)


class LinkSpec(LinkState):
    """An emulated link; ``schedule`` makes it time-varying (piecewise constant).

    ``kind`` (a registered link kind) overrides ``links.mode`` for this link;
    ``kind: mmwave`` takes its rate from the ``mmwave:`` channel parameters.
    """

    schedule: list[LinkSegment] = Field(default_factory=list)
    kind: str | None = Field(None, description="a link kind; default: links.mode")
    mmwave: MmwaveLinkSpec | None = None

    @field_validator("kind")
    @classmethod
    def _link_kind(cls, v: str | None) -> str | None:
        from testbed.emulation.kinds import LINK_KINDS

        if v is not None and v not in LINK_KINDS:
            raise ValueError(f"unknown link kind {v!r}; choose one of {[*LINK_KINDS]}")
        return v

    @model_validator(mode="after")
    def _radio(self) -> LinkSpec:
        if self.mmwave is not None and self.kind not in (None, "mmwave"):
            raise ValueError(f"mmwave: channel parameters need kind: mmwave (not {self.kind})")
        if self.mmwave is not None and self.bandwidth_mbps is not None:
            raise ValueError("bandwidth_mbps: an mmwave link's rate comes from its channel")
        return self

    def kind_in(self, mode: str) -> str:
        """The link kind of this link under ``links.mode`` = ``mode``."""
        return self.kind or ("mmwave" if self.mmwave is not None else mode)

    def link_options(self) -> dict[str, Any]:
        """Keyword arguments of its kind's ``build``, ``build_in_container`` and ``price``
        beyond the common ones (mmwave: ``radio``)."""
        return {"radio": self.mmwave} if self.mmwave is not None else {}

    def link_schedule(self) -> LinkSchedule:
        """A ``LinkSchedule`` starting with this link's own properties at t = 0."""
        from testbed.emulation.link import LinkSchedule

        segs = {0.0: self.params()} | {s.at_s: s.params() for s in self.schedule}
        return LinkSchedule(sorted(segs.items()))


class LinksSpec(Frozen):
    """Links: defaults per tier pair (``edge-cloud``, order-free) and overrides per node."""

    mode: str = Field("proxy", description="a link kind, or none (no emulated links)")
    defaults: dict[str, LinkSpec] = Field(default_factory=dict)
    nodes: dict[str, LinkSpec] = Field(default_factory=dict)

    @field_validator("mode")
    @classmethod
    def _link_kind(cls, v: str) -> str:
        """A registered link kind (:data:`testbed.emulation.kinds.LINK_KINDS`) or none."""
        from testbed.emulation.kinds import LINK_KINDS

        if v != "none" and v not in LINK_KINDS:
            raise ValueError(f"unknown link kind {v!r}; choose one of {[*LINK_KINDS, 'none']}")
        return v

    @field_validator("defaults")
    @classmethod
    def _tier_pairs(cls, v: dict[str, LinkSpec]) -> dict[str, LinkSpec]:
        for key in v:
            parts = key.split("-")
            if len(parts) != 2 or any(p not in TIERS for p in parts):
                raise ValueError(
                    f"link default {key!r} must be 'tierA-tierB' with tiers in {TIERS}"
                )
        return v

    def for_pair(self, a: str, b: str) -> LinkSpec:
        """Default link between tiers ``a`` and ``b`` (unlimited when not given)."""
        return self.defaults.get(f"{a}-{b}") or self.defaults.get(f"{b}-{a}") or LinkSpec()

    def kind_path(self, name: str, node: NodeSpec, peer_tier: str) -> str:
        """The YAML path that gives node ``name``'s link (see :meth:`for_node`) its kind:
        ``links.<nodes.KEY | defaults.PAIR>.kind`` (or ``.mmwave``), else ``links.mode``."""
        pairs = (f"{node.tier}-{peer_tier}", f"{peer_tier}-{node.tier}")
        tables = [("nodes", self.nodes, (name, node.id)), ("defaults", self.defaults, pairs)]
        for part, table, keys in tables:
            key = next((k for k in keys if k in table), None)
            if key is not None:
                spec = table[key]
                field = "kind" if spec.kind else "mmwave" if spec.mmwave else None
                return f"links.{part}.{key}.{field}" if field else "links.mode"
        return "links.mode"

    def for_node(self, name: str, node: NodeSpec, peer_tier: str) -> LinkSpec:
        """Link of node ``name`` (a replica of ``node``) to a peer in ``peer_tier``: the
        override for the replica, else for the node id, else the tier-pair default."""
        return (
            self.nodes.get(name) or self.nodes.get(node.id) or self.for_pair(node.tier, peer_tier)
        )


class NodeSpec(Frozen):
    """One node (or ``count`` replicas named ``id-1 .. id-count``)."""

    id: str
    tier: Tier
    profile: str | DeviceProfile = "host"
    count: int = Field(1, ge=1, le=MAX_FLEET_NODES)
    role: Literal["server", "client", "none"] | None = None
    profile_mix: dict[str, float] = Field(
        default_factory=dict,
        description="replicas draw their profile from these weights (seeded); replaces profile",
    )
    placement: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "--backend swarm: where its containers run, every key must match: "
            "hostname, node (a swarm node id), role (manager|worker), or an engine "
            "label (tier: edge)"
        ),
    )

    @field_validator("placement")
    @classmethod
    def _placement(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not PLACEMENT_KEY.match(key):
                raise ValueError(
                    f"placement key {key!r}: letters, digits, '.', '_' and '-' only"
                )
            if not value or any(c.isspace() for c in value) or "=" in value:
                raise ValueError(f"placement.{key}: {value!r} must be one word (no '=')")
            if key == "role" and value not in ("manager", "worker"):
                raise ValueError(f"placement.role: {value!r} must be manager or worker")
        return v

    @field_validator("profile_mix")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        if v and (any(w < 0 for w in v.values()) or sum(v.values()) <= 0):
            raise ValueError("profile weights must be >= 0 with a positive sum")
        return v

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not NODE_ID.match(v):
            raise ValueError(
                "node id must be lowercase letters, digits and '-', starting with a letter"
            )
        return v

    @property
    def fl_role(self) -> str:
        """``server`` for a cloud node unless set, else ``client``."""
        return self.role or ("server" if self.tier == "cloud" else "client")

    def names(self) -> list[str]:
        """Concrete node names after replication."""
        return (
            [self.id] if self.count == 1 else [f"{self.id}-{i}" for i in range(1, self.count + 1)]
        )


class FleetSpec(Frozen):
    """The nodes of the continuum."""

    nodes: list[NodeSpec] = Field(min_length=1)

    @field_validator("nodes")
    @classmethod
    def _total(cls, v: list[NodeSpec]) -> list[NodeSpec]:
        total = sum(n.count for n in v)
        if total > MAX_FLEET_NODES:
            raise ValueError(
                f"{total} nodes in all (counts included); a fleet may have at most "
                f"{MAX_FLEET_NODES}"
            )
        return v


class FaultSpec(Frozen):
    """A fault: what, on whom, when.

    ``kind`` is a registered fault kind (:data:`testbed.faults.FAULT_KINDS`); every
    other key of the fault's YAML entry is a parameter of the kind, validated by the
    kind's own ``Params`` model (:func:`kind_params`), each error naming its YAML path.
    ``params`` is that validated model (``f.params.duration_s``); a dump of the fault
    shows the parameters beside the trigger, as in the YAML.

    Triggers (exactly one): ``at_round`` (``phase: before`` fires when round
    ``at_round - 1`` ends, i.e. before the round's messages go out; ``during`` fires
    ``delay_s`` after the round started), ``at_time_s`` (seconds after the fleet is
    ready) or ``probability`` (per round and target, drawn from the run's seed).
    Targets: ``node`` (a node name, or a node id replicated with ``count``) or ``tier``.
    """

    model_config = ConfigDict(frozen=True, extra="allow")  # the kind's parameters

    kind: str
    node: str | None = None
    tier: Tier | None = None
    at_round: int | None = Field(None, ge=1)
    at_time_s: float | None = Field(None, ge=0)
    probability: float | None = Field(None, ge=0, le=1)
    phase: Literal["before", "during"] = "before"
    delay_s: float = Field(1.0, ge=0, description="phase 'during': seconds after round start")
    _params: FaultParams = PrivateAttr()

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str) -> str:
        from testbed.faults import FAULT_KINDS

        return FAULT_KINDS.check(kind)

    @model_validator(mode="wrap")
    @classmethod
    def _kind_params(cls, data: Any, handler: ModelWrapValidatorHandler[FaultSpec]) -> FaultSpec:
        self = handler(data)
        self._params = kind_params(self)  # ValidationError located at this fault's fields
        # the extras become the kind's validated parameters, defaults included
        object.__setattr__(self, "__pydantic_extra__", self._params.model_dump())
        return self

    @model_validator(mode="after")
    def _trigger(self) -> FaultSpec:
        from testbed.faults import FAULT_KINDS

        if sum(x is not None for x in (self.at_round, self.at_time_s, self.probability)) != 1:
            raise ValueError(
                "a fault needs exactly one trigger: at_round, at_time_s or probability"
            )
        if FAULT_KINDS[self.kind].target != "server" and self.node is None and self.tier is None:
            raise ValueError("a fault needs a target: node or tier")
        return self

    @property
    def params(self) -> FaultParams:
        """The kind's validated parameters (an instance of the kind's ``Params``)."""
        return self._params


def kind_params(f: FaultSpec) -> FaultParams:
    """Validate the parameters of fault ``f`` (its keys beyond the trigger and target)
    with its kind's ``Params`` model.

    A key the kind does not declare is an error (``factor: 2`` on a crash) unless it is
    a parameter of another registered kind left at that kind's default (``null``, or
    ``repeat: 3``): experiments/reference.yaml shows every kind's keys on one fault.
    Raises ``pydantic.ValidationError`` whose locations are the fault's field names.
    """
    from pydantic_core import InitErrorDetails, PydanticCustomError

    from testbed.faults import FAULT_KINDS

    model = FAULT_KINDS[f.kind].Params
    given = f.model_extra or {}
    values = {k: v for k, v in given.items() if k in model.model_fields or not _idle(k, v)}
    try:
        return model.model_validate(values)
    except ValidationError as e:
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "value_error" if x["type"] == "extra_forbidden" else x["type"],
                    _param_message(f.kind, model, x),
                ),
                loc=tuple(x["loc"]),
                input=x.get("input"),
            )
            for x in e.errors()
        ]
        raise ValidationError.from_exception_data("FaultSpec", errors) from None


def _idle(key: str, value: Any) -> bool:
    """Whether ``key: value`` is a parameter of a registered fault kind at its default
    (None counts as unset): shown, meaning nothing for a kind without it."""
    from testbed.faults import FAULT_KINDS

    if value is None:
        return any(key in FAULT_KINDS[k].Params.model_fields for k in FAULT_KINDS)
    for name in FAULT_KINDS:
        field = FAULT_KINDS[name].Params.model_fields.get(key)
        if field is not None and not field.is_required() and field.default == value:
            return True
    return False


def _param_message(kind: str, model: Any, err: Any) -> str:
    """``an outage fault needs duration_s (seconds the node stays down)`` and the like."""
    field = str(err["loc"][0]) if err["loc"] else ""
    if err["type"] == "missing":
        desc = model.model_fields[field].description
        article = "an" if kind[:1] in "aeiou" else "a"
        return f"{article} {kind} fault needs {field}" + (f" ({desc})" if desc else "")
    if err["type"] == "extra_forbidden":
        return f"not a parameter of fault kind {kind!r} (its own: {sorted(model.model_fields)})"
    return str(err["msg"]).removeprefix("Value error, ")


class SweepSpec(Frozen):
    """A grid over dotted keys; every combination is one run (times repetitions)."""

    grid: dict[str, list[object]] = Field(default_factory=dict)

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, v: dict[str, list[object]]) -> dict[str, list[object]]:
        for k, vals in v.items():
            if not vals:
                raise ValueError(f"sweep key {k!r} has no values")
        return v


class WorkloadSpec(Frozen):
    """What the fleet runs. Exactly one section is set: a built-in one below, or the
    section of a workload registered with :func:`testbed.workloads.register_workload`
    (validated by that class's ``spec_model``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    fl: FLSpec | None = None
    semantic_mux: SemanticMuxSpec | None = None
    compress: CompressSpec | None = None
    functions: FunctionsSpec | None = None

    @model_validator(mode="after")
    def _one(self, info: ValidationInfo) -> WorkloadSpec:
        extra = self.__pydantic_extra__ or {}
        if extra:
            _validate_registered(extra, info.context)
        sections = (self.fl, self.semantic_mux, self.compress, self.functions)
        if sum(x is not None for x in sections) + len(extra) < 1:
            from testbed.workloads.registry import WORKLOADS

            raise ValueError(f"workload needs one or more of: {', '.join(WORKLOADS)}")
        return self

    @property
    def sections(self) -> list[str]:
        """The names of the sections that are set (workload registry keys), built-in
        ones first; several run together on one fleet (:mod:`testbed.spec.hosting`)."""
        builtin = ("fl", "semantic_mux", "compress", "functions")
        return [k for k in builtin if getattr(self, k) is not None] + list(
            self.__pydantic_extra__ or {}
        )

    @property
    def section(self) -> str:
        """The name of the (first) section that is set (the workload's registry key)."""
        return self.sections[0]

    def model_for(self, section: str) -> BaseModel:
        """The validated model of section ``section``."""
        value = getattr(self, section)
        assert isinstance(value, BaseModel)
        return value

    def section_spec(self) -> BaseModel:
        """The validated model of the (first) section that is set."""
        return self.model_for(self.section)


def _validate_registered(extra: dict[str, Any], context: Any = None) -> None:
    """Replace every extra section by its registered workload's model (ValueError naming
    the section and the registered workloads otherwise); ``context`` is the spec's
    validation context (its folder, for the paths a section names)."""
    from testbed.workloads.registry import WORKLOADS

    known = WORKLOADS
    for key, raw in extra.items():
        if key not in known:
            raise ValueError(f"workload.{key}: unknown workload; choose one of {sorted(known)}")
        model = known[key].spec_model
        try:
            valid = raw if isinstance(raw, model) else model.model_validate(raw, context=context)
            extra[key] = valid
        except ValidationError as e:
            raise ValueError("\n".join(_section_errors(key, e))) from None


def _section_errors(key: str, e: ValidationError) -> list[str]:
    """``workload.KEY.path: message`` lines of a registered section's errors (a
    model-level message of ``path: message`` lines is split into them)."""
    out = []
    for err in e.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        loc = ".".join(map(str, err["loc"]))
        for line in msg.split("\n"):
            head, sep, tail = line.partition(": ")
            if not loc and sep and " " not in head:
                out.append(f"workload.{key}.{head}: {tail}")
            else:
                out.append(f"workload.{key}{'.' + loc if loc else ''}: {line}")
    return out


def _fl_nodes(fleet: FleetSpec, refs: list[str]) -> list[NodeSpec]:
    """The fleet's nodes that ``workload.fl.nodes`` names (ids, or replica names)."""
    return [n for n in fleet.nodes if n.id in refs or any(x in refs for x in n.names())]


class Experiment(Frozen):
    """A whole experiment file."""

    name: str = Field(min_length=1)
    description: str = ""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    repetitions: int = Field(1, ge=1, le=10_000)
    profiles: dict[str, DeviceProfile] = Field(default_factory=dict)
    fleet: FleetSpec | None = None
    links: LinksSpec = LinksSpec()
    workload: WorkloadSpec
    faults: list[FaultSpec] = Field(default_factory=list)
    space: SpaceSpec | None = None
    sweep: SweepSpec = SweepSpec()
    simulation: SimulationSpec | None = None  # read by --backend simulation only
    time_dilation: float | Literal["auto"] = Field(
        1.0,
        description="TDF: every emulated second lasts TDF wall seconds, so devices up to "
        "TDF x this host's speed run at their profile's speed; 'auto' = the fastest "
        "profile's speed (docs/time-dilation.md)",
    )

    @field_validator("time_dilation")
    @classmethod
    def _tdf(cls, v: float | str) -> float | str:
        if v != "auto" and not (isinstance(v, int | float) and 1.0 <= v <= 100.0):
            raise ValueError("a time-dilation factor is a number from 1 to 100, or 'auto'")
        return v

    @model_validator(mode="after")
    def _references(self) -> Experiment:
        """Every problem across sections at once, one ``path: message`` per line."""
        errors: list[str] = []
        if self.workload.fl is not None and self.fleet is None:
            errors.append("fleet: required for an fl workload")
        if self.workload.functions is not None and self.fleet is None:
            errors.append("fleet: required for a functions workload")
        names: list[str] = []
        if self.fleet is not None:
            names = [name for n in self.fleet.nodes for name in n.names()]
            errors += self._fleet_errors(self.fleet, names)
        refs = self._node_references()
        known = set(names) if refs else set()  # (a lookup per reference, not a scan)
        errors += [
            f"{path}: node {node!r} is not defined in fleet.nodes (defined: {sorted(names)})"
            for path, node in refs
            if node not in known
        ]
        if len(self.workload.sections) > 1 or self.fleet is not None:
            from testbed.spec.hosting import hosting_errors

            errors += hosting_errors(self, names)
        errors += self._radio_errors()
        if not errors and self.fleet is not None:
            for key, section in (self.workload.__pydantic_extra__ or {}).items():
                hook = getattr(section, "fleet_errors", None)  # a registered workload's
                errors += [f"workload.{key}.{e}" for e in (hook(self) if hook else [])]
        if errors:
            raise ValueError("\n".join(errors))  # one "path: message" per line
        return self

    def _fleet_errors(self, fleet: FleetSpec, names: list[str]) -> list[str]:
        """Unknown profiles, duplicate node names and the fl workload's roles."""
        errors: list[str] = []
        catalog = {**CATALOG, **self.profiles}
        for i, n in enumerate(fleet.nodes):
            if isinstance(n.profile, str) and n.profile not in catalog:
                errors.append(
                    f"fleet.nodes.{i}.profile: unknown profile {n.profile!r}; "
                    f"choose one of {sorted(catalog)} or define it under profiles"
                )
            errors += [
                f"fleet.nodes.{i}.profile_mix.{p}: unknown profile; choose one of "
                f"{sorted(catalog)} or define it under profiles"
                for p in n.profile_mix
                if p not in catalog
            ]
        dup = sorted(x for x, k in Counter(names).items() if k > 1)
        if dup:
            errors.append(f"fleet.nodes: duplicate node names {dup}")
        if self.workload.fl is None:
            return errors
        if self.workload.fl.nodes is not None:  # FL runs on the nodes it names
            fleet = fleet.model_copy(update={"nodes": _fl_nodes(fleet, self.workload.fl.nodes)})
        servers = [n.id for n in fleet.nodes if n.fl_role == "server"]
        if sum(n.count for n in fleet.nodes if n.fl_role == "server") != 1:
            errors.append(
                f"fleet.nodes: an fl workload needs exactly one server node "
                f"(a cloud node, or role: server); found {servers or 'none'}"
            )
        if not any(n.fl_role == "client" for n in fleet.nodes):
            errors.append("fleet.nodes: an fl workload needs at least one client node")
        fl = self.workload.fl
        if fl.app is None:  # the strategy's own assumptions on the fleet (Krum, Bulyan)
            from nodes.fl.strategies import assumption_errors

            clients = sum(len(n.names()) for n in fleet.nodes if n.fl_role == "client")
            errors += assumption_errors(fl.strategy.name, fl.strategy.params, clients)
        return errors

    def _radio_errors(self) -> list[str]:
        """mmwave links on a pair with no radio side (no end in a RADIO_TIERS tier)."""
        mode = self.links.mode
        errors = [
            f"links.defaults.{key}.kind: an mmwave link needs a radio side (one end in "
            f"{list(RADIO_TIERS)}); {key!r} has none"
            for key, spec in self.links.defaults.items()
            if spec.kind_in(mode) == "mmwave" and not set(key.split("-")) & set(RADIO_TIERS)
        ]
        tiers = {
            name: n.tier for n in (self.fleet.nodes if self.fleet else []) for name in n.names()
        } | {n.id: n.tier for n in (self.fleet.nodes if self.fleet else [])}
        errors += [
            f"links.nodes.{key}.kind: an mmwave link needs a radio side (a node in "
            f"{list(RADIO_TIERS)}); {key!r} is a {tiers[key]} node"
            for key, spec in self.links.nodes.items()
            if spec.kind_in(mode) == "mmwave" and tiers.get(key, "edge") not in RADIO_TIERS
        ]
        if mode == "mmwave":
            fleet = self.fleet.nodes if self.fleet else []
            bad = sorted(
                name for n in fleet if n.fl_role != "server" and n.tier not in RADIO_TIERS
                for name in n.names() if name not in self.links.nodes
            )
            if bad:
                errors.append(
                    f"links.mode: mmwave gives every node a radio link, but {bad} are not in "
                    f"{list(RADIO_TIERS)}; use kind: mmwave on the edge nodes' links instead"
                )
        return errors + self._kind_mode_errors(mode)

    def _kind_mode_errors(self, mode: str) -> list[str]:
        """Per-link kinds that ``links.mode`` cannot mix with: any under ``none``; mmwave
        (a host-side proxy) under ``netem`` (the SuperLink listens in its own namespace)."""
        tables = (("defaults", self.links.defaults), ("nodes", self.links.nodes))
        if mode == "none":
            return [
                f"links.{part}.{key}.kind: links.mode is none (no emulated links)"
                for part, table in tables
                for key, spec in table.items()
                if spec.kind is not None or spec.mmwave is not None
            ]
        if mode == "netem":
            return [
                f"links.{part}.{key}.kind: an mmwave link is a host-side proxy and cannot "
                "reach a SuperLink in its own namespace (links.mode: netem); use links.mode: "
                "proxy with mmwave links"
                for part, table in tables
                for key, spec in table.items()
                if spec.kind_in(mode) == "mmwave"
            ]
        return []

    def _node_references(self) -> list[tuple[str, str]]:
        """``(YAML path, node name)`` of every place outside ``fleet`` naming a node."""
        refs = [(f"links.nodes.{key}", key) for key in self.links.nodes]
        if self.space is not None:
            refs += [(f"space.satellites.{key}", key) for key in self.space.satellites]
            refs += [(f"space.relays.{i}.node", r.node) for i, r in enumerate(self.space.relays)]
        fns = self.workload.functions.functions if self.workload.functions else []
        refs += [
            (f"workload.functions.functions.{i}.node", fn.node)
            for i, fn in enumerate(fns)
            if fn.node is not None
        ]
        refs += [
            (f"faults.{i}.node", f.node) for i, f in enumerate(self.faults) if f.node is not None
        ]
        for key, section in (self.workload.__pydantic_extra__ or {}).items():
            named = getattr(section, "node_references", None)  # a registered workload's
            refs += [(f"workload.{key}.{path}", node) for path, node in (named() if named else [])]
        return refs

    def profile_of(self, node: NodeSpec) -> DeviceProfile:
        """Resolve a node's profile (inline, experiment-defined or built-in)."""
        if isinstance(node.profile, DeviceProfile):
            return node.profile
        return {**CATALOG, **self.profiles}[node.profile]
