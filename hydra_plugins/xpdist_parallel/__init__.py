"""xpdist's `hydra/launcher=local_parallel`: a sweep's jobs in processes forked from the sweep's
(xpdist.driver.sweeps.parallel_launcher)."""
