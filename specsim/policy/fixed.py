"""SD policies whose draft length is a function of the active count alone (no pricing).

* off              k = 0
* always(k)        k
* threshold(k, max_batch)   k while n <= max_batch, else 0 — a fixed batch threshold: speculate
                   only once the shrinking batch is memory-bound (NVIDIA's SD harness for the 8B
                   runs gates SD off above batch 8 this way)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from specsim.errors import SpecError
from specsim.policy.base import SDPolicy


@dataclass(frozen=True)
class Off(SDPolicy):
    """Plain autoregressive decoding."""

    kind: ClassVar[str] = "off"
    fields: ClassVar[tuple[str, ...]] = ()

    @property
    def ks(self) -> tuple[int, ...]:
        return (0,)

    @property
    def label(self) -> str:
        return "off"

    def choose(self, n: np.ndarray, rate: np.ndarray | None = None) -> np.ndarray:
        return np.zeros(len(n), dtype=np.int64)

    @staticmethod
    def speculates(spec: dict[str, Any]) -> bool:
        return False

    @classmethod
    def from_section(cls, section: Any, tree: Any) -> SDPolicy:
        return cls()


@dataclass(frozen=True)
class Always(SDPolicy):
    """Speculate at k on every step (k = 0 is plain decoding: `off`)."""

    kind: ClassVar[str] = "always"
    tree_ok: ClassVar[bool] = True

    @property
    def label(self) -> str:
        return f"always({self.k_label})"

    def choose(self, n: np.ndarray, rate: np.ndarray | None = None) -> np.ndarray:
        return np.where(n > 0, self.k, 0).astype(np.int64)

    @staticmethod
    def speculates(spec: dict[str, Any]) -> bool:
        return spec.get("k", 0) > 0

    @classmethod
    def from_section(cls, section: Any, tree: Any) -> SDPolicy:
        if section.k == 0:
            if tree is not None:
                raise SpecError("speculation.k", 0, f"the tree's depth {tree.depth} (a tree needs k = depth)")
            return Off()
        return super().from_section(section, tree)


@dataclass(frozen=True)
class Threshold(SDPolicy):
    """Speculate at k while the engine's active batch is at most `max_batch`."""

    kind: ClassVar[str] = "threshold"
    fields: ClassVar[tuple[str, ...]] = ("k", "max_batch")
    batch_dependent: ClassVar[bool] = True
    tree_ok: ClassVar[bool] = True

    max_batch: int = 0

    @property
    def label(self) -> str:
        return f"threshold({self.k_label}, max_batch={self.max_batch})"

    def choose(self, n: np.ndarray, rate: np.ndarray | None = None) -> np.ndarray:
        return np.where((n > 0) & (n <= self.max_batch), self.k, 0).astype(np.int64)

    @classmethod
    def from_section(cls, section: Any, tree: Any) -> SDPolicy:
        return cls(k=section.k, tree=tree, estimate=getattr(section, "acceptance_estimate", "drafter"),
                   max_batch=section.max_batch)
