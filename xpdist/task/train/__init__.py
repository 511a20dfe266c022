"""Trainers: `fit` (Keras Model.fit) and `ctl` (a custom training loop)."""
