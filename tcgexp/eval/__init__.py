"""Play as a metric: a run's trained policy against opponents in its game's arena (``tcgexp.games.play.Arena``),
counted (``tcgexp.winrate``): ``evaluate.py`` (what a run's end and ``tcgexp-eval`` play, record and track),
``config.py`` (the ``eval`` group's schema, and how a run's eval settings are read back).

Above the run's lifecycle (a checkpoint's weights, result.json) and below the training app; it names no game:
the run's ``dataset.game`` is asked for its arena (``tcgexp.games.registry``)."""
