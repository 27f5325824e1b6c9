"""fairseq-urpe: relative-position (RPE) and universal RPE (URPE) attention for fairseq.

Importing the package registers the models and architectures with fairseq
(``fairseq-train --user-dir fairseq_urpe --arch transformer_lm_urpe``).
"""

from . import models  # noqa: F401  (registers models and architectures)
from . import tasks  # noqa: F401  (registers position_synthetic)
from . import criterions  # noqa: F401  (registers token_accuracy)
