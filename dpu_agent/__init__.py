"""The agent beside each trainer: predictor core (C++), its bindings, and the agent process."""
from dpu_agent.predictors import PredictorCore  # noqa: E402,F401
