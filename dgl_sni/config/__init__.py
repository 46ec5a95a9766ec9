"""Run configuration, declared once.

Each part is a dataclass whose fields carry their help text and command-line form
(:func:`.options.option`): :class:`DataConfig`, :class:`ClusterConfig`,
:class:`ModelConfig`, :class:`SNIConfig`, :class:`TierConfig`, :class:`OutputConfig`.
:class:`TrainConfig` is composed of them; the flags of ``dgl-sni train``, of the worker
and of ``dgl-sni partition`` are generated from the fields (:mod:`.flags`). Importing
this package imports neither DGL nor torch.
"""
from storage_tier.sizes import parse_bytes  # noqa: F401  (re-exported for callers)

from .cluster import CLUSTER_MODES, METHODS, ClusterConfig  # noqa: F401
from .data import DataConfig  # noqa: F401
from .flags import add_part_arguments, part_from_args  # noqa: F401
from .model import MODEL_NAMES, ModelConfig  # noqa: F401
from .output import OutputConfig  # noqa: F401
from .sni import AGENT_MODES, PREDICTORS, STALE_GRAD, SYNC_POLICIES, SNIConfig  # noqa: F401
from .sweep import SWEEPABLE, load_sweep  # noqa: F401
from .tier import TierConfig  # noqa: F401
from .train import TrainConfig, add_train_arguments, from_args  # noqa: F401
