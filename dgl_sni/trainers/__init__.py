"""Full-graph trainers: in memory (:mod:`.full_graph`) and through the storage tier (:mod:`.tier`)."""
from .base import LocalView, ModelConfig, TrainerBase  # noqa: F401
from .full_graph import FullGraphTrainer  # noqa: F401
from .tier import TierTrainer  # noqa: F401
