"""``hydra/sweeper=halving``: successive halving over Optuna's ask/tell, continuing promoted trials exactly.

``config.py`` the sweeper's typed settings; ``space.py`` the search space in Hydra's sweep grammar;
``asha.py`` the rungs, promotions and replicate statistics (pure: no Optuna, no Hydra);
``study.py`` the Optuna study (storage, settings, one trial per configuration); ``outcome.py`` what a
finished job left in its run dir; ``sweeper.py`` the sweep itself (batches for the launcher); ``results.py``
``optimization_results.yaml``, ``trials.json`` (the sweep report's input) and the Aim marks. The Hydra plugin
class is ``hydra_plugins.tcgexp_sweepers.halving.HalvingSweeper`` (Hydra loads sweepers from there only).
"""
