"""How a run or a job ended, in the words the driver, the Python API and the reports share."""

# The file a single run's outcome is written to as JSON, where the caller (xpdist.run(), the
# advisor) names one in this variable; the sweep's callback writes the sweep's.
RESULT_FILE_ENV = "XPDIST_RESULT_FILE"
