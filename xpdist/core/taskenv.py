"""Environment variables the driver sets for every task process it starts."""

# When the driver started the task process (time.time()), the zero of first_step_s: the
# kernel's process start time, rebuilt from the boot time in whole seconds, was up to a
# second off here.
LAUNCHED_AT_ENV = "XPDIST_TASK_LAUNCHED_AT"
# The driver's pid: the task dies with it (PR_SET_PDEATHSIG), or exits at once if the driver
# is already gone when it asks.
DRIVER_PID_ENV = "XPDIST_DRIVER_PID"
