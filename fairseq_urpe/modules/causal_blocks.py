"""Query-row blocks of a causal attention, each against only the keys it can see.

Under fairseq's future mask (0 on and below the diagonal, -inf above; ``T = S``), query ``i`` sees keys
``0 .. i``. A block of rows ``r0 .. r1 - 1`` then needs keys ``0 .. r1 - 1`` only: the scores right of them
are -inf, their probabilities exactly 0, and they add nothing to the output or to any gradient. Blocks of
``R`` rows, each against its own key prefix, make ``T (T + R) / 2`` scores instead of ``T^2``:

    T = 512, R = 128 (4 blocks):  62.5% of the scores       T = 2048, R = 256 (8 blocks):  56%

Each block's product, softmax and reweighting are those of the whole matrix restricted to its rows and
keys. With attention dropout each block draws its own mask.
"""

import math
from typing import List, Tuple

MIN_ROWS = 128  # rows per block at least: shorter inputs are one block, as without blocks
MAX_BLOCKS = 8  # blocks per call at most: longer inputs get longer blocks


def causal_blocks(length: int) -> List[Tuple[slice, int]]:
    """``[(rows, keys)]``: the query rows of each block and how many keys (a prefix) it reads, for a causal
    self-attention over ``length`` positions; one block ``(0 .. length - 1, length)`` up to ``MIN_ROWS``."""
    rows = max(MIN_ROWS, math.ceil(length / MAX_BLOCKS))
    return [(slice(start, min(length, start + rows)), min(length, start + rows)) for start in range(0, length, rows)]
