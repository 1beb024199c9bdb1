"""A run's lifecycle: its folder and who owns it, stopping signals, checkpoints and their files, resume and
what it must match, result.json, and a distributed run's ranks (their world, launcher, status and parent).

It uses ``tcgexp.learn``'s state and checks; ``tcgexp.train`` composes both into a run.
"""
