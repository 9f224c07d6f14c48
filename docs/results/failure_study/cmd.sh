# The failure-study subset measured for docs/results/failure_study.md (30 runs).
cd /work/main && exec .venv/bin/testbed run experiments/failure_study.yaml --parallel 2 --out /work/study \
  --set repetitions=2 \
  --set 'sweep.grid={workload.fl.partitioner: [{name: iid}, {name: dirichlet, alpha: 1.0, min_partition_size: 20}, {name: dirichlet, alpha: 0.1, min_partition_size: 20}], faults: [[], [{kind: crash, node: silo-2, at_round: 2}], [{kind: crash, node: silo-2, at_round: 4}], [{kind: crash, node: silo-2, at_round: 6}], [{kind: outage, node: silo-2, at_round: 2, duration_s: 15}]]}'
