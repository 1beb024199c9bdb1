"""Learning: the recurrent policy, its losses and their gradient, the compiled step on both paths (pure MLX and
tcgexp's fused kernels), the optimizers and schedules, the batches a step takes and the state it carries.

Nothing here knows of run folders, signals or checkpoints (``tcgexp.lifecycle``) or of how a run is
composed (``tcgexp.train``).
"""
