from . import position_synthetic  # noqa: F401  (registers the task)
