"""xpdist: declarative tf.distribute experiments, Hydra configs in, MLflow runs out."""

__version__ = "0.1.0"
