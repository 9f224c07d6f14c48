"""The kernel every package builds on: named registries (:mod:`kernel.registry`) and the
frozen spec-model base (:mod:`kernel.frozen`). It imports none of ``ui``, ``testbed``,
``nodes`` or ``radio``, so each of them may import it without an arrow pointing up."""
