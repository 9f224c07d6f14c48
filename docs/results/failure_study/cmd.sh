# The full failure-study sweep (105 runs: 5 skews x 7 conditions x 3 seeds), session 6.
# fast protocol timing (Flower's 3 s polls shortened; accuracy is not affected, rounds are
# shorter), Shapley on (the YAML's evaluation block), --parallel 3 (crash/outage runs mostly
# wait on the 30 s round deadline).
cd /work/main && exec .venv/bin/testbed run experiments/failure_study.yaml --parallel 3 --out /work/study-s6 \
  --set workload.fl.protocol_timing=fast
