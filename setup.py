"""Packaging that pyproject.toml cannot say: conf/ ships inside the package.

conf/ stays at the repository's top level (where Hydra users look for it) and is
installed as the package ``tcgexp.conf`` (``<site-packages>/tcgexp/conf/``), so an
installed tcgexp finds its configs from any directory; ``tcgexp.config.CONF_DIR``
picks that folder when it exists and the top-level one in a source checkout.
``hydra_plugins/tcgexp_sweepers`` (``hydra/sweeper=halving``) goes into Hydra's plugin namespace.
Everything else about the project is in pyproject.toml.
"""

from setuptools import find_namespace_packages, find_packages, setup

setup(
    # hydra_plugins.tcgexp_sweepers: hydra/sweeper=halving (Hydra loads sweepers from that namespace only)
    packages=[
        *find_packages(include=["tcgexp", "tcgexp.*"]),
        "tcgexp.conf",
        *find_namespace_packages(include=["hydra_plugins.*"]),
    ],
    package_dir={"tcgexp.conf": "conf"},
    # tcgexp.kernels' C++ sources: compiled at first use against the MLX installed then (tcgexp/kernels/build.py)
    package_data={"tcgexp.conf": ["*.yaml", "**/*.yaml"], "tcgexp.kernels": ["csrc/*.cpp", "csrc/*.h"]},
)
