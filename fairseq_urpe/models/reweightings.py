"""URPE's ``C``, one declaration per value of ``--urpe-toeplitz``: :data:`REWEIGHTINGS`.

``C_ij = c_h(i - j)`` multiplies the probabilities; like the bias ``b`` it is Toeplitz (a function of
``i - j``). Each declaration is a :class:`~.kind_record.Reweighting`: the options its table is built from,
as keywords of :class:`~fairseq_urpe.modules.ToeplitzReweighting`.
"""

from typing import Dict

from ..modules import ToeplitzReweighting
from .kind_record import Reweighting

REWEIGHTINGS: Dict[str, Reweighting] = {
    "none": Reweighting(None, description="no C (plain RPE)"),
    "bucketed": Reweighting(
        ToeplitzReweighting, shape=("num_heads", "bidirectional"), reads=("rpe_num_buckets", "rpe_max_distance"),
        keywords={"parameterisation": "bucketed"}, error_names=True,
        description="c per T5 bucket of b (the buckets of --rpe-num-buckets and --rpe-max-distance)"),
    "unique": Reweighting(
        ToeplitzReweighting, shape=("num_heads", "bidirectional"), reads=("urpe_max_distance", "urpe_beyond_max"),
        keywords={"parameterisation": "unique"}, error_names=True,
        description="c per distance up to --urpe-max-distance"),
}
