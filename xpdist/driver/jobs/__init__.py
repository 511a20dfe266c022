"""One experiment's life in the driver: job.py records, launches and closes the MLflow run;
resume.py continues a FAILED or KILLED run; requeue.py continues a requeued SLURM job;
outcome.py reads how the task processes ended."""
