"""What the driver and the task processes hand each other, without TensorFlow or MLflow:
jobdir.py the job directory (the config, the plan, the run's readiness, metrics, the task's
result), resolved.py the config resolved once, taskenv.py the environment a task starts with,
outcome.py how a run or a job ended, verification.py what a task records for `verify`."""
