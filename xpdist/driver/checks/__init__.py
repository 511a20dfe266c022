"""Every check the driver makes before a run exists, none with TensorFlow: preflight.py runs them
in order, one module per concern (data, model, strategy, training, sweep, tuning), check.py is
`--check`, config_errors.py turns Hydra's compose errors into one line. A failure is a
ConfigError (xpdist/core/errors.py): one line naming the key, exit code 2."""
