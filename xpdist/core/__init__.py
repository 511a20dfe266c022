"""What the driver and the task share, with neither TensorFlow nor MLflow.

Each option lives once, in its own module: strategies/, clusters/ and data_sources/ hold one
module per option (its schema dataclass and its spec); schema/ holds the whole config, the
groups that are no seam, and every list of options, read from the registries (registry.py).
options.py is the public API through which a user's package adds an option of its own.
"""
