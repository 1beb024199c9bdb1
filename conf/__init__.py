"""Hydra's configs, installed as the package ``tcgexp.conf`` (see setup.py); only YAML lives here."""
