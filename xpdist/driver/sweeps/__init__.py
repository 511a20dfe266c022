"""Sweeps (`-m`): sweep.py keeps the MLflow parent run and its children, parallel_launcher.py and
ray_launcher.py are the Hydra launchers behind hydra/launcher=local_parallel and ray, tuning/ is
the Optuna sweeper's study."""
