"""TBPTT planning: lanes, chunks and packed microbatches (the epoch's full access trace)."""
from .lanes import Key, Lane, LaneIndex, RowGroupRef
from .planner import ORDERS, Chunk, Microbatch, Plan, Planner

__all__ = ["Key", "Lane", "LaneIndex", "RowGroupRef", "Chunk", "Microbatch", "Plan", "Planner", "ORDERS"]
