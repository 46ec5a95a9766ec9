"""The agent beside each trainer: predictor core (C++), its bindings, and the agent process."""
