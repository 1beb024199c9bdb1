"""Every command tcgexp installs (``[project.scripts]``), one module each, above the library they drive:
``train`` (``tcgexp-train``), ``data`` (``tcgexp-data``), ``bench`` (``tcgexp-bench``), ``kernels``
(``python -m tcgexp.kernels``), ``evaluate`` (``tcgexp-eval``), ``export`` (``tcgexp-export``), ``report``
(``tcgexp-report``), ``launch`` (``tcgexp-launch``), ``replay`` (``tcgexp-replay``). ``python -m tcgexp.train``
(and ``.data``, ``.bench``, ``.kernels``, and ``python -m tcgexp.eval``) run the same modules by name."""
