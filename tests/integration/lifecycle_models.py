"""User model functions for tests/integration/test_lifecycle.py (model=custom model._target_=...)."""


def raising_model(input_shape, num_outputs, **kwargs):
    """A user's model function with a bug: the same error on every try."""
    raise ValueError("this model function always fails")
