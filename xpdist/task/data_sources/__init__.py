"""Data sets read from files or made by the user's function, streamed through tf.data.

The in-memory data sets (xpdist.task.data) are NumPy arrays; these are not. A `Split` stands
where the arrays' x would be, so the trainers call the same three functions of
xpdist.task.data whatever the source: global batches (Model.fit), a per-pipeline dataset
function (distribute_datasets_from_function) and a parameter-server worker's batches.
"""
