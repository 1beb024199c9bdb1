"""The trained network as a player, in numpy: the recurrent policy's forward pass for one decision at a time.

``Net`` holds the weights under the names MLX gives them (``encoder.layers.0.weight``, ..., as
``model.safetensors`` stores them) and runs the model's layers as plain products (``tcgexp/learn/model.py``
writes each one so): the row encoder, the trunk over the encoding and the lane's memory, the option head
(each offered option's encoding against a query of the state) and the stop head, and the minGRU memory step
a decision makes once answered. ``NetPolicy`` answers an observation with the network's own choices: at each
pick the highest-scoring option still offered; after a pick, stop where the rows would let the agent stop
(``substep + 1 >= minCount``, ``< maxCount``, options left) when the stop head says so (logit > 0), else go
on while the count must grow. No heuristic on top. Numpy only: the same file runs inside a submission
(``bundle.py``), and ``tests/games/cabt/test_play.py`` holds its scores to the MLX model's.
"""

from __future__ import annotations

import numpy as np

from .observe import Decision
from .tables import Tables

Z_MAX = 0.9  # the memory's update gate cap (tcgexp/learn/scan.py)
GATE_SLOPE = 0.25  # hard sigmoid: clip(0.25 x + 0.5, 0, Z_MAX)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0))


class Net:
    """The network's weights and its forward pass on one row at a time (float32, as trained)."""

    def __init__(self, weights: dict[str, np.ndarray], *, memory: bool = True) -> None:
        w = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
        self.w = w
        self.memory = bool(memory)
        self.hidden = int(w["encoder.layers.0.weight"].shape[0])
        self.input_dim = int(w["encoder.layers.0.weight"].shape[1])
        if "option.weight" not in w:
            raise ValueError("these weights have no option head (option.weight): not a policy of the real game")
        self.option_dim = int(w["option.weight"].shape[1])
        # the transposed weights a row multiplies by
        self.t = {k: np.ascontiguousarray(v.T) for k, v in w.items() if v.ndim == 2}

    def _lin(self, name: str, x: np.ndarray) -> np.ndarray:
        return x @ self.t[name + ".weight"] + self.w[name + ".bias"]

    def encode(self, x: np.ndarray) -> np.ndarray:
        """The row encoder: [..., F+A+1] -> [..., H]."""
        return _relu(self._lin("encoder.layers.2", _relu(self._lin("encoder.layers.0", x))))

    def trunk(self, enc: np.ndarray, h: np.ndarray) -> np.ndarray:
        """The trunk over the encoding and the memory the row reads (zeros without memory)."""
        h_row = h if self.memory else np.zeros_like(enc)
        return _relu(self._lin("trunk.layers.0", np.concatenate([enc, h_row], axis=-1)))

    def option_encodings(self, options: np.ndarray) -> np.ndarray:
        """Each option's encoding: [K, O] -> [K, H]."""
        return _relu(self._lin("option", options))

    def scores(self, z: np.ndarray, enc_options: np.ndarray) -> np.ndarray:
        """Each option's score (unmasked): its encoding against the state's query."""
        q = self._lin("query", z)
        return (enc_options * q[None, :]).sum(axis=-1, dtype=np.float32)

    def stop_logit(self, z: np.ndarray, chosen: np.ndarray) -> float:
        """The logit of stopping after the pick whose encoding is `chosen`."""
        row = np.concatenate([z, chosen])
        return float((row * self.w["stop.weight"][0]).sum(dtype=np.float32) + self.w["stop.bias"][0])

    def step_memory(self, h: np.ndarray, enc_first: np.ndarray, chosen_options: np.ndarray) -> np.ndarray:
        """The memory after a decision: gates on the decision's first row's encoding and the sum of the picked
        options' vectors; h' = (1 - z) h + z tanh~(c) with z a hard sigmoid capped at Z_MAX."""
        H = self.hidden
        w = self.w["gates.weight"]
        g = enc_first @ self.t["gates.weight"][:H] + (chosen_options @ w[:, H:].T + self.w["gates.bias"])
        k, c = g[:H], g[H:]
        z = np.clip(np.float32(GATE_SLOPE) * k + np.float32(0.5), np.float32(0.0), np.float32(Z_MAX))
        cand = np.clip(c, np.float32(-1.0), np.float32(1.0))
        return ((np.float32(1.0) - z) * h + z * cand).astype(np.float32)


class NetPolicy:
    """The network playing: ``deck()``, ``reset()`` at each new round (the memory starts afresh, as a lane does),
    ``choose(obs)`` -> option indices. ``trace`` (when a list) receives each pick's (scores masked, stop logit)."""

    def __init__(
        self, net: Net, tb: Tables, deck: list[int], *, max_options: int, would_ko: bool = True, name: str = "policy"
    ) -> None:
        self.net, self.tb, self._deck, self.name = net, tb, list(deck), name  # name: as a match's messages say it
        self.max_options, self.would_ko = max_options, would_ko
        self.trace: list | None = None
        self.reset()

    def deck(self) -> list[int]:
        return list(self._deck)

    def reset(self) -> None:
        self.h = np.zeros(self.net.hidden, np.float32)

    def choose(self, obs: dict) -> list[int]:
        d = Decision(self.tb, obs, self.max_options, self.would_ko)
        hi = min(d.max_count, d.n)
        if hi <= 0:
            return []  # nothing to pick (no row: the memory does not move)
        net = self.net
        picks: list[int] = []
        enc_first = None
        chosen = np.zeros(net.option_dim, np.float32)
        enc_options = None
        for k in range(hi):
            x, options, mask = d.row(picks)
            enc = net.encode(x)
            if enc_first is None:
                enc_first = enc
            z = net.trunk(enc, self.h)
            enc_options = net.option_encodings(options)
            scores = net.scores(z, enc_options)
            masked = np.where(mask, scores, np.float32(-1e9))
            pick = int(np.argmax(masked))
            chosen += options[pick]
            picks.append(pick)
            after = k + 1
            stop = None
            if after < hi and after >= d.min_count and int(mask.sum()) > 1:  # stopping here is the agent's choice
                stop = net.stop_logit(z, enc_options[pick])
            if self.trace is not None:
                self.trace.append((masked, stop))
            if after >= hi or (after >= d.min_count and (stop is None or stop > 0)):
                break
        self.h = net.step_memory(self.h, enc_first, chosen)
        return picks

    def probabilities(self, obs: dict) -> np.ndarray:
        """The network's probability of each offered option as the first pick (softmax over the masked scores;
        options past the model's slots get 0), its memory left as it was: a search agent's prior."""
        sel = obs["select"]
        probs = np.zeros(len(sel["option"]), np.float64)
        d = Decision(self.tb, obs, self.max_options, self.would_ko)
        if d.n <= 0:
            return probs
        x, options, _ = d.row([])
        z = self.net.trunk(self.net.encode(x), self.h)
        scores = self.net.scores(z, self.net.option_encodings(options))[: d.n].astype(np.float64)
        e = np.exp(scores - scores.max())
        probs[: d.n] = e / e.sum()
        return probs

    def advance(self, obs: dict, picks: list[int]) -> None:
        """Move the memory as if this policy had answered `obs` with `picks` (a search agent's own answer): the
        same update ``choose`` makes after its picks."""
        d = Decision(self.tb, obs, self.max_options, self.would_ko)
        picks = [p for p in picks if p < d.n]
        if min(d.max_count, d.n) <= 0:
            return
        x, options, _ = d.row([])
        chosen = np.zeros(self.net.option_dim, np.float32)
        for p in picks:
            chosen += options[p]
        self.h = self.net.step_memory(self.h, self.net.encode(x), chosen)
