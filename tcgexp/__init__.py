"""tcgexp: Hydra-composed experiments for recurrent behaviour cloning of a TCG agent."""

__version__ = "0.1.0"
