"""SNI settings: declared in :mod:`dgl_sni.config.sni` (the prediction part of a run's config)."""
from ..config.sni import AGENT_MODES, PREDICTORS, STALE_GRAD, SYNC_POLICIES, SNIConfig  # noqa: F401
