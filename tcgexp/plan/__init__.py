"""TBPTT planning: lanes, chunks and packed microbatches (the epoch's full access trace)."""

from .lanes import Key, Lane, LaneIndex, RowGroupRef
from .plan import Microbatch, Plan
from .planner import ORDERS, Planner

__all__ = ["ORDERS", "Key", "Lane", "LaneIndex", "Microbatch", "Plan", "Planner", "RowGroupRef"]
