"""Training: the trainers `fit` (Keras Model.fit), `ctl` (a custom training loop) and `ps_ctl`
(parameter_server's coordinator loop), common.py what they share, and the Keras pieces they are
built from the config: losses, schedules, callbacks, clipping, precision, and resize (the
learning rate of a run resumed at another size)."""
