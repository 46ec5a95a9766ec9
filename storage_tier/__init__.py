"""Structured storage offloading of activations (host cache + SSD) and its partitioner."""
