from . import token_accuracy  # noqa: F401  (registers the criterion)
