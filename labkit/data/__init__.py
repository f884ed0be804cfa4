"""Data for the course: datasets that ship with packages (no downloads) and batching."""
from labkit.data.digits import Split, batches, load_digits  # noqa: F401
