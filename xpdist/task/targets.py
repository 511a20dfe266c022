"""`_target_` paths of the training pieces (loss, optimizer, metrics, callbacks), resolved.

A path that starts with `keras.` is looked up in the Keras the run uses, which is Keras 3 or
tf-keras (tf.keras either way): `keras.losses.Huber` is then the class the model's own Keras
has, so one config serves both flavours. Any other path goes to Hydra's `get_method`.
"""

from __future__ import annotations

from typing import Any


def resolve(keras, target: str, key: str) -> Any:
    """The object `target` names.

    Args:
        keras: the run's Keras module (tf.keras).
        target: a dotted path, `keras.` first for the run's Keras.
        key: the config key, for the message (`loss._target_`).

    Raises:
        ValueError: the path cannot be imported, in one line naming the key.
    """
    if target.startswith("keras."):
        found: Any = keras
        for part in target.split(".")[1:]:
            found = getattr(found, part, None)
            if found is None:
                raise ValueError(f"{key}={target}: the run's Keras ({flavour(keras)}) has no {target}. "
                                 "Give a dotted path that exists in it, or a module.Class of your own.")
        return found
    # Imported here: hydra.utils pulls in Hydra's instantiate machinery, which only a
    # _target_ needs (as in models.custom).
    from hydra.utils import get_method

    try:
        return get_method(target)
    except Exception as err:  # Hydra raises ImportError or its own InstantiationException
        raise ValueError(f"{key}={target} cannot be imported ({err}). "
                         "Give module.Class with its package installed or on PYTHONPATH.") from None


def flavour(keras) -> str:
    return "tf-keras" if keras.__name__.startswith("tf_keras") else "Keras 3"
