"""SD policies that price their choice with the engine's own cost table and acceptance estimate.

* toggle(k, margin)   k while the predicted SD speedup τ(α̂, k) · step_s(0) / step_s(k, n, C) is
                      >= 1 + margin, else 0 — EfficientRollout's roofline toggle
                      (github.com/furiosa-ai/EfficientRollout: vLLM core.py _check_sd_toggle,
                      sd_toggle/predict.py should_enable_sd, margin 0.05 in its run scripts), priced
                      by the engine's own cost table instead of its fitted roofline. Its engine also
                      latches SD on for the rest of a rollout once enabled; in a closed rollout the
                      running batch only shrinks, so the test rarely flips back, and specsim
                      re-evaluates it at every batch change.
* adaptive(k_max)     argmax over k in 0..k_max of expected tokens per second n·τ(α̂, k) / step_s(k, n, C)
                      — ReSpec's / EfficientRollout's acceptance-aware choice, priced by the same
                      cost table the engine uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from specsim.errors import SpecError
from specsim.policy.base import SDPolicy


@dataclass(frozen=True)
class Toggle(SDPolicy):
    """Speculate at k while its predicted rate clears (1 + margin) × decoding's."""

    kind: ClassVar[str] = "toggle"
    fields: ClassVar[tuple[str, ...]] = ("k", "toggle_margin")
    batch_dependent: ClassVar[bool] = True
    priced: ClassVar[bool] = True

    margin: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        if self.margin < 0:
            raise SpecError("speculation.toggle_margin", self.margin, ">= 0")

    @property
    def label(self) -> str:
        return f"toggle({self.k_label}, margin={self.margin:g})"

    def choose(self, n: np.ndarray, rate: np.ndarray | None = None) -> np.ndarray:
        k = np.where(rate[1] >= (1.0 + self.margin) * rate[0], self.k, 0)   # ks == (0, k)
        return np.where(n > 0, k, 0).astype(np.int64)

    @classmethod
    def from_section(cls, section: Any, tree: Any) -> SDPolicy:
        return cls(k=section.k, tree=tree, estimate=getattr(section, "acceptance_estimate", "drafter"),
                   margin=getattr(section, "toggle_margin", 0.05))


@dataclass(frozen=True)
class Adaptive(SDPolicy):
    """The k in 0..k_max with the highest predicted tokens per second."""

    kind: ClassVar[str] = "adaptive"
    fields: ClassVar[tuple[str, ...]] = ("k_max",)
    k_field: ClassVar[str] = "k_max"
    batch_dependent: ClassVar[bool] = True
    priced: ClassVar[bool] = True

    k_max: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.k_max < 0:
            raise SpecError("speculation.k_max", self.k_max, ">= 0")

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(range(self.k_max + 1))

    @property
    def label(self) -> str:
        return f"adaptive(k<={self.k_max})"

    def choose(self, n: np.ndarray, rate: np.ndarray | None = None) -> np.ndarray:
        k = np.asarray(self.ks)[np.argmax(rate, axis=0)]
        return np.where(n > 0, k, 0).astype(np.int64)

    @classmethod
    def from_section(cls, section: Any, tree: Any) -> SDPolicy:
        return cls(k=section.k, tree=tree, estimate=getattr(section, "acceptance_estimate", "drafter"),
                   k_max=section.k_max)
