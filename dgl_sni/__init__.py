"""dgl-sni: exact and communication-efficient full-graph training for DistDGL.

Importing ``dgl_sni`` applies the DGL compatibility shims in ``patches`` first, so it
must come before ``import dgl`` in user scripts.
"""
import patches as _patches

_patches.apply()

__version__ = "0.1.0"
