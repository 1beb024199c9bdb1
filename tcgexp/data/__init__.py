"""The day-partitioned Parquet corpus: replay ZIPs, builder, manifests, catalog."""

from .corpus import Corpus
from .errors import BuildRefused, DataError

__all__ = ["BuildRefused", "Corpus", "DataError"]
