"""Run an evaluation at a batch size, and once more at half of it if the first runs out of memory."""

from typing import Callable, Tuple, TypeVar

T = TypeVar("T")


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's OutOfMemoryError (a RuntimeError), or another backend's RuntimeError saying so."""
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def halved(max_tokens: int, unit: int, floor: int) -> int:
    """Half of ``max_tokens`` in whole ``unit``s (the tokens one window or block scores), not below ``floor``
    (the largest single item), so that every item still fits a batch."""
    return max(floor, (max_tokens // 2) // unit * unit)


def with_one_retry_at_half(evaluate: Callable[[int], T], max_tokens: int, unit: int, floor: int,
                           free_memory: Callable[[], None] = lambda: None) -> Tuple[T, int]:
    """``(evaluate(max_tokens), max_tokens)``; if that runs out of memory, ``free_memory()`` and one more try
    at the halved batch, whose result or error is final. Any other error is raised as it is."""
    try:
        return evaluate(max_tokens), max_tokens
    except RuntimeError as error:
        smaller = halved(max_tokens, unit, floor)
        if not is_out_of_memory(error) or smaller >= max_tokens:
            raise
        print(f"== out of memory at --max-tokens {max_tokens}; once more at --max-tokens {smaller}", flush=True)
    free_memory()
    return evaluate(smaller), smaller
