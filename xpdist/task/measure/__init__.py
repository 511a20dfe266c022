"""What the task measures beside the loss: flops.py counts a step's FLOPs (for the run's mfu),
profile.py traces the steps trainer.profile_steps names with TensorFlow's profiler."""
