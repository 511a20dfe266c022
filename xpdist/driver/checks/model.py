"""Preflight checks of model=keras_app and model=transformer against the data, without TensorFlow."""

from __future__ import annotations

from pathlib import Path

from xpdist.core import data_sources, keras_apps
from xpdist.core.errors import ConfigError, did_you_mean


def check(cfg, launch_dir: Path) -> None:
    """Raises ConfigError naming the key when the model cannot take the data set's examples."""
    if cfg.model.name == "keras_app":
        _check_keras_app(cfg, launch_dir)
    elif cfg.model.name == "transformer":
        _check_transformer(cfg, launch_dir)


def _check_keras_app(cfg, launch_dir: Path) -> None:
    arch = cfg.model.architecture
    if arch not in keras_apps.ARCHITECTURES:
        raise ConfigError("model.architecture", arch, "keras.applications of Keras 3 and tf-keras have no such model",
                          "Choose one of " + ", ".join(keras_apps.ARCHITECTURES) + "."
                          + did_you_mean(arch, keras_apps.ARCHITECTURES, "model.architecture="))
    shape = data_sources.of(cfg).input_shape(cfg, launch_dir)
    if shape is None:  # only TensorFlow knows (a user's function): Keras says it at build time
        return
    least = keras_apps.min_size(arch)
    if len(shape) != 3 or min(shape[0], shape[1]) < least:
        raise ConfigError("model", "keras_app", f"{arch} needs images of height x width x channels, each side at "
                          f"least {least}; dataset={cfg.dataset.name} has examples of shape {tuple(shape)}",
                          f"Use dataset=synthetic_images dataset.image_shape=[{max(least, 32)},{max(least, 32)},3] "
                          "(or 224,224,3 for the architecture's own size), or your own images that large.")


def _check_transformer(cfg, launch_dir: Path) -> None:
    m = cfg.model
    for key in ("num_layers", "num_heads", "width", "ff_width"):
        if m[key] < 1:
            raise ConfigError(f"model.{key}", m[key], "must be 1 or more", f"Set model.{key} to a positive number.")
    if m.width % m.num_heads:
        raise ConfigError("model.width", m.width, f"must be a multiple of model.num_heads={m.num_heads} "
                          "(each head gets width / num_heads dimensions)",
                          f"Use model.width={m.num_heads * max(1, round(m.width / m.num_heads))}.")
    shape = data_sources.of(cfg).input_shape(cfg, launch_dir)
    if shape is not None and len(shape) != 1:
        raise ConfigError("model", "transformer", f"an encoder reads token sequences (one axis of token ids); "
                          f"dataset={cfg.dataset.name} has examples of shape {tuple(shape)}",
                          "Use dataset=synthetic_tokens, or a data set of integer token ids.")
    if m.vocab_size is None and "vocab_size" not in cfg.dataset:
        raise ConfigError("model.vocab_size", "null", f"dataset={cfg.dataset.name} does not say its vocabulary size",
                          "Set model.vocab_size to the number of distinct token ids (ids are 0..vocab_size-1).")
    if m.vocab_size is not None and m.vocab_size < 1:
        raise ConfigError("model.vocab_size", m.vocab_size, "must be 1 or more", "Drop it or set the vocabulary size.")
