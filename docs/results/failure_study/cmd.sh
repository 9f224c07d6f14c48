# The failure-study subset measured for docs/results/failure_study.md (63 runs, one sweep id).
# Session 1 ran 30 of them (seeds 1-2, five conditions); session 2 added seed 3 and the
# mid/late transient outages under the same sweep id (the sweep skips finished runs).
cd /work/main && exec .venv/bin/testbed run experiments/failure_study.yaml --parallel 2 --out /work/study \
  --sweep-id failure_study-a10964d8 \
  --set repetitions=3 \
  --set 'sweep.grid={workload.fl.partitioner: [{name: iid}, {name: dirichlet, alpha: 1.0, min_partition_size: 20}, {name: dirichlet, alpha: 0.1, min_partition_size: 20}], faults: [[], [{kind: crash, node: silo-2, at_round: 2}], [{kind: crash, node: silo-2, at_round: 4}], [{kind: crash, node: silo-2, at_round: 6}], [{kind: outage, node: silo-2, at_round: 2, duration_s: 15}], [{kind: outage, node: silo-2, at_round: 4, duration_s: 15}], [{kind: outage, node: silo-2, at_round: 6, duration_s: 15}]]}'
