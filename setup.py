"""Packaging that pyproject.toml cannot say: conf/ ships inside the package.

conf/ stays at the repository's top level (where Hydra users look for it) and is
installed as the package ``tcgexp.conf`` (``<site-packages>/tcgexp/conf/``), so an
installed tcgexp finds its configs from any directory; ``tcgexp.config.CONF_DIR``
picks that folder when it exists and the top-level one in a source checkout.
Everything else about the project is in pyproject.toml.
"""
from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["tcgexp", "tcgexp.*"]), "tcgexp.conf"],
    package_dir={"tcgexp.conf": "conf"},
    package_data={"tcgexp.conf": ["*.yaml", "**/*.yaml"]},
)
