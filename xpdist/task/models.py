"""Models (`model` options) and optimizers, for Keras 3 and tf-keras alike (losses: losses.py).

Builders take `keras`, which is `tf.keras`: Keras 3, or tf-keras when TF_USE_LEGACY_KERAS=1
was set before TensorFlow was imported. They only use API both flavours share.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Sequence

from xpdist.core.registry import Registry

MODELS = Registry("model")


def _inputs(keras, input_shape: Sequence[int]) -> List[Any]:
    layers = [keras.Input(shape=tuple(input_shape))]
    if len(input_shape) > 1:
        layers.append(keras.layers.Flatten())
    return layers


@MODELS.register("linear")
def linear(keras, cfg, input_shape, num_outputs):
    """The guide's model: Dense(num_outputs) with an L2 kernel regularizer."""
    return keras.Sequential(_inputs(keras, input_shape) + [
        keras.layers.Dense(num_outputs, kernel_regularizer=keras.regularizers.L2(cfg.model.l2))])


@MODELS.register("mlp")
def mlp(keras, cfg, input_shape, num_outputs):
    hidden = [keras.layers.Dense(units, activation="relu", kernel_regularizer=keras.regularizers.L2(cfg.model.l2))
              for units in cfg.model.hidden_units]
    tail = [keras.layers.Dropout(cfg.model.dropout)] if cfg.model.dropout else []
    return keras.Sequential(_inputs(keras, input_shape) + hidden + tail + [keras.layers.Dense(num_outputs)])


@MODELS.register("cnn")
def cnn(keras, cfg, input_shape, num_outputs):
    """Conv2D + MaxPool blocks, global average pooling, one Dense output (images only)."""
    layers: List[Any] = [keras.Input(shape=tuple(input_shape))]
    if len(input_shape) == 2:
        layers.append(keras.layers.Reshape((*input_shape, 1)))
    size = min(input_shape[0], input_shape[1])
    for filters in cfg.model.filters:
        layers.append(keras.layers.Conv2D(filters, 3, padding="same", activation="relu"))
        if size >= 4:
            layers.append(keras.layers.MaxPooling2D())
            size //= 2
    layers.append(keras.layers.GlobalAveragePooling2D())
    if cfg.model.dropout:
        layers.append(keras.layers.Dropout(cfg.model.dropout))
    layers.append(keras.layers.Dense(num_outputs, kernel_regularizer=keras.regularizers.L2(cfg.model.l2)))
    return keras.Sequential(layers)


@MODELS.register("keras_app")
def keras_app(keras, cfg, input_shape, num_outputs):
    """An architecture of keras.applications with weights=None (nothing downloaded), without its
    top, at the data's image shape; then global average pooling and one Dense of logits.

    The applications' own top ends in a softmax; the run's losses take logits, so the top is ours.
    """
    build = getattr(keras.applications, cfg.model.architecture)
    base = build(include_top=False, weights=None, input_shape=tuple(input_shape), pooling="avg")
    x = base.output
    if cfg.model.dropout:
        x = keras.layers.Dropout(cfg.model.dropout)(x)
    outputs = keras.layers.Dense(num_outputs, kernel_regularizer=keras.regularizers.L2(cfg.model.l2))(x)
    return keras.Model(base.inputs, outputs, name=cfg.model.architecture.lower())


@MODELS.register("transformer")
def transformer(keras, cfg, input_shape, num_outputs):
    """A small encoder classifier: token and learned position embeddings, model.num_layers
    post-norm blocks (multi-head self-attention, feed-forward of model.ff_width, residuals and
    LayerNorm), mean pooling over the sequence, one Dense of logits."""
    m = cfg.model
    seq_len = int(input_shape[0])
    vocab = int(m.vocab_size if m.vocab_size is not None else cfg.dataset.vocab_size)
    inputs = keras.Input(shape=(seq_len,), dtype="int32")
    x = keras.layers.Embedding(vocab, m.width)(inputs)
    x = position_embedding_layer(keras)(seq_len, m.width)(x)
    for _ in range(m.num_layers):
        attended = keras.layers.MultiHeadAttention(m.num_heads, m.width // m.num_heads, dropout=m.dropout)(x, x)
        x = keras.layers.LayerNormalization()(keras.layers.Add()([x, attended]))
        hidden = keras.layers.Dense(m.ff_width, activation="relu")(x)
        hidden = keras.layers.Dense(m.width)(hidden)
        if m.dropout:
            hidden = keras.layers.Dropout(m.dropout)(hidden)
        x = keras.layers.LayerNormalization()(keras.layers.Add()([x, hidden]))
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(num_outputs, kernel_regularizer=keras.regularizers.L2(m.l2))(x)
    return keras.Model(inputs, outputs, name="transformer")


_POSITION_LAYERS: Dict[str, type] = {}


def position_embedding_layer(keras) -> type:
    """The learned position embedding layer of the given Keras (one class per flavour).

    Keras 3 and tf-keras have no position embedding layer in common (keras-hub's needs Keras 3),
    so it is this small layer, registered as `xpdist>PositionEmbedding` so that a saved model
    loads again in a process that has called this function for its Keras.
    """
    key = keras.__name__
    if key not in _POSITION_LAYERS:
        @keras.utils.register_keras_serializable(package="xpdist")
        class PositionEmbedding(keras.layers.Layer):
            def __init__(self, length, width, **kwargs):
                super().__init__(**kwargs)
                self.length, self.width = int(length), int(width)

            def build(self, input_shape):
                self.table = self.add_weight(name="table", shape=(self.length, self.width),
                                             initializer=keras.initializers.RandomNormal(stddev=0.02))
                super().build(input_shape)

            def call(self, x):
                return x + self.table

            def get_config(self):
                return {**super().get_config(), "length": self.length, "width": self.width}

        _POSITION_LAYERS[key] = PositionEmbedding
    return _POSITION_LAYERS[key]


@MODELS.register("custom")
def custom(keras, cfg, input_shape, num_outputs):
    """Calls model._target_, the user's model function, and checks it built with the run's Keras.

    The contract of a model function: it is called as
    `fn(input_shape=..., num_outputs=..., **model.kwargs)`, plus `keras=<the run's Keras module>`
    when it has a parameter named `keras`, and returns a model of that Keras, whose outputs are
    logits (classification) or values (regression). The run's Keras is Keras 3 or tf-keras
    (see the `keras` option); a function that does `import keras` builds a Keras 3 model, which
    a tf-keras run cannot train, so a function should build with the `keras` it is handed.

    Example:
        def build(input_shape, num_outputs, keras, units=16):
            return keras.Sequential([keras.Input(shape=input_shape),
                                     keras.layers.Dense(units, activation="relu"),
                                     keras.layers.Dense(num_outputs)])

    Raises:
        ValueError: model._target_ cannot be imported.
        TypeError: the function returned something that is not a model of the run's Keras.
    """
    # Imported here: hydra.utils pulls in Hydra's instantiate machinery, which every task
    # would pay for before its first step while only model=custom needs it.
    from hydra.utils import get_method

    target = cfg.model._target_
    try:
        builder: Callable = get_method(target)
    except Exception as err:  # Hydra raises ImportError or its own InstantiationException
        raise ValueError(f"model._target_={target} cannot be imported ({err}). "
                         "Give the dotted path of a callable that returns a Keras model.") from None
    kwargs = dict(cfg.model.kwargs)
    if _takes_keras(builder):
        kwargs["keras"] = keras
    model = builder(input_shape=tuple(input_shape), num_outputs=num_outputs, **kwargs)
    if not isinstance(model, keras.Model):
        raise TypeError(f"model._target_={target} returned {_describe(model)}, but this run trains with "
                        f"{_flavour(keras.Model)} ({_why_flavour(cfg)}). Give the function a `keras` "
                        "parameter and build the model with it: def fn(input_shape, num_outputs, keras): ...")
    return model


def _takes_keras(builder: Callable) -> bool:
    try:
        return "keras" in inspect.signature(builder).parameters
    except (TypeError, ValueError):  # a callable without a signature Python can read
        return False


def _flavour(cls: type) -> str:
    root = cls.__module__.split(".")[0]
    return {"keras": "Keras 3", "tf_keras": "tf-keras"}.get(root, root)


def _describe(obj: Any) -> str:
    kind = type(obj)
    if kind.__module__.split(".")[0] in ("keras", "tf_keras"):
        return f"a {_flavour(kind)} {kind.__name__}"
    return f"a {kind.__module__}.{kind.__qualname__}"


def _why_flavour(cfg) -> str:
    if cfg.keras != "auto":
        return f"keras={cfg.keras}"
    return f"keras=auto chooses it for strategy={cfg.strategy.name} with trainer={cfg.trainer.name}"


def example_custom_model(input_shape, num_outputs, keras, units: int = 16):
    """An example for model=custom: one hidden layer of `units`, built with the run's Keras."""
    return keras.Sequential(_inputs(keras, input_shape) + [
        keras.layers.Dense(units, activation="relu"), keras.layers.Dense(num_outputs)])


def build_model(keras, cfg, input_shape, num_outputs):
    return MODELS.get(cfg.model.name)(keras, cfg, input_shape, num_outputs)


# optimizer option -> builder(keras, options, learning_rate); the rate is the plan's (scaled),
# or a schedule of it (xpdist.task.train.schedules).
OPTIMIZERS = Registry("optimizer")
# optimizer option -> its Keras class; the option's keys, those of the plan aside, are its arguments.
_KERAS_OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop", "adagrad": "Adagrad",
                     "lion": "Lion", "lamb": "Lamb"}
# Keys read by the plan (the learning rate and its scaling) or by the custom option itself.
_NOT_ARGUMENTS = ("name", "learning_rate", "lr_scaling", "reference_batch_size", "lr_table", "_target_", "kwargs")


def optimizer_arguments(opt) -> Dict[str, Any]:
    """The option's keys that go to the Keras optimizer; a null shared key is left to Keras."""
    return {k: v for k, v in opt.items() if k not in _NOT_ARGUMENTS and v is not None}


def _keras_optimizer(class_name: str):
    def build(keras, opt, learning_rate):
        cls = getattr(keras.optimizers, class_name, None)
        if cls is None:  # preflight refuses these first (optimizer=lamb under tf-keras)
            raise ValueError(f"optimizer={opt.name}: the run's Keras has no keras.optimizers.{class_name}")
        return cls(learning_rate=learning_rate, **optimizer_arguments(opt))

    return build


for _option, _class in _KERAS_OPTIMIZERS.items():
    OPTIMIZERS.register(_option)(_keras_optimizer(_class))


@OPTIMIZERS.register("custom")
def _custom_optimizer(keras, opt, learning_rate):
    """optimizer._target_: a Keras optimizer class, with the shared keys and optimizer.kwargs."""
    from xpdist.task.targets import flavour, resolve

    cls = resolve(keras, opt._target_, "optimizer._target_")
    if not (isinstance(cls, type) and issubclass(cls, keras.optimizers.Optimizer)):
        raise TypeError(f"optimizer._target_={opt._target_} is not an optimizer: give a keras.optimizers.Optimizer "
                        f"subclass of the run's Keras ({flavour(keras)}).")
    return cls(learning_rate=learning_rate, **optimizer_arguments(opt), **dict(opt.kwargs))


def build_optimizer(keras, cfg, learning_rate):
    """The run's optimizer; learning_rate is a number or a Keras LearningRateSchedule."""
    return OPTIMIZERS.get(cfg.optimizer.name)(keras, cfg.optimizer, learning_rate)
