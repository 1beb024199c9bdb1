"""The one update rule the MLX step and every peer apply in the benchmark (each port writes it in its framework)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdamWRule:
    """mlx.optimizers.AdamW as tcgexp configures it (conf/optimizer/adamw.yaml), constant schedule:

    g <- g min(clip / (|g| + 1e-6), 1);  p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;
    v <- b2 v + (1 - b2) g^2;  p <- p - lr m / (sqrt(v) + eps)     (no bias correction)
    """

    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float = 1.0

    def mlx(self):
        """The MLX optimizer applying this rule (what the trainer builds from conf/optimizer/adamw.yaml)."""
        import mlx.optimizers as optim

        return optim.AdamW(self.lr, betas=list(self.betas), eps=self.eps, weight_decay=self.weight_decay)
