"""TBPTT planning: lanes, chunks and packed microbatches (the epoch's full access trace)."""
from .lanes import Key, Lane, LaneIndex, RowGroupRef
from .plan import Microbatch, Plan
from .planner import ORDERS, Planner

__all__ = ["Key", "Lane", "LaneIndex", "RowGroupRef", "Microbatch", "Plan", "Planner", "ORDERS"]
