"""Gradient clipping after the gradients of all replicas are summed, under Keras 3.

Clipping is not linear: clipping each replica's share of the gradient and then summing is not
clipping the gradient of the global batch. tf-keras aggregates first and clips after
(its Optimizer.apply_gradients), the order TensorFlow chose when it disabled clipping under
distribution strategies until it could be done that way (tensorflow/tensorflow#33929).
Keras 3 clips first: BaseOptimizer.apply clips in `_backend_apply_gradients`, then the
TensorFlow backend's `_backend_update_step` all-reduces. With `optimizer.global_clipnorm`,
two mirrored replicas then train differently from one device on the same global batch
(measured: final loss 1.23 against 1.81).

Keras 3 has no public hook between the all-reduce and the update, so `after_all_reduce`
reaches inside its optimizer: the run's optimizer becomes an instance of a subclass whose
`_clip_gradients` does nothing and whose `_all_reduce_sum_gradients` (keras/src/backend/
tensorflow/optimizer.py) clips the summed gradients with the original `_clip_gradients`. No
second all-reduce, and one place for `Model.fit` and the custom loop alike (both call
`optimizer.apply`). The subclass keeps the class's name and module, so a saved model's
optimizer loads as the class the user asked for. Under one replica, and under
parameter_server (each worker's step is its own update), the order makes no difference.
"""

from __future__ import annotations

_CLIPS = ("global_clipnorm", "clipnorm", "clipvalue")


def clips(optimizer) -> bool:
    """Whether the optimizer clips gradients at all."""
    return any(getattr(optimizer, key, None) for key in _CLIPS)


def after_all_reduce(keras, optimizer):
    """The optimizer, clipping after the all-reduce under Keras 3; unchanged otherwise.

    The two private methods are checked first: a Keras that renames them fails here, by name,
    instead of clipping in the wrong place without a word.
    """
    from xpdist.task.targets import flavour

    if flavour(keras) == "tf-keras" or not clips(optimizer):
        return optimizer
    base = type(optimizer)
    for method in ("_clip_gradients", "_all_reduce_sum_gradients"):
        if not callable(getattr(base, method, None)):
            raise RuntimeError(f"keras {keras.__version__}: {base.__name__} has no {method}; xpdist cannot clip "
                               "after the all-reduce (see xpdist/task/train/clipping.py)")

    def _clip_gradients(self, grads):
        return grads  # moved after the all-reduce, below

    def _all_reduce_sum_gradients(self, grads_and_vars):
        reduced = list(base._all_reduce_sum_gradients(self, grads_and_vars))
        present = [i for i, (grad, _) in enumerate(reduced) if grad is not None]
        clipped = base._clip_gradients(self, [reduced[i][0] for i in present])
        for i, grad in zip(present, clipped):
            reduced[i] = (grad, reduced[i][1])
        return reduced

    optimizer.__class__ = type(base.__name__, (base,), {
        "__module__": base.__module__, "__qualname__": base.__qualname__,
        "_clip_gradients": _clip_gradients, "_all_reduce_sum_gradients": _all_reduce_sum_gradients})
    return optimizer
