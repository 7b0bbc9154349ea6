"""The `schedule` SD policy: k by the engine's batch size from a table, as vLLM ships it.

vLLM's Dynamic SD (PR #32374, `speculative_config.num_speculative_tokens_per_batch_size`) maps
inclusive batch-size ranges to a draft length, e.g. ``{"1-16": 3, "17-128": 2, "129-4096": 0}``
(the list form ``[[1, 16, 3], [17, 128, 2], [129, 4096, 0]]`` of vLLM RFC #48627 is read too). The
scheduler looks the running batch up at every step: a batch in a gap between ranges, or above the
last one, takes the k of the range before it, and the k used is min(num_speculative_tokens, k)
(`speculation.k` is num_speculative_tokens). specsim re-evaluates the lookup at every batch
change (the batch is fixed between them), which is the engine's per-step lookup.

The table must start at batch 1 (a batch below the first range has no k in vLLM's rule), its
ranges must be sorted and disjoint, bounds >= 1 and each k >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from specsim.errors import SpecError
from specsim.policy.base import SDPolicy

FIELD = "speculation.k_per_batch_size"
ALLOWED = ("vLLM's table of inclusive batch ranges to a draft length, sorted and disjoint from batch 1, "
           'e.g. {"1-16": 3, "17-128": 2, "129-4096": 0} or [[1, 16, 3], [17, 128, 2], [129, 4096, 0]]')
MAX_BATCH_BOUND = 1_000_000
#: as `speculation.k`
MAX_DRAFT_LENGTH = 32


def _whole(value: Any, what: str, minimum: int, maximum: int = MAX_BATCH_BOUND) -> int:
    allowed = f"{what}: a whole number >= {minimum} (at most {maximum:,}); {ALLOWED}"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(FIELD, value, allowed)
    try:
        out = int(str(value).strip())
    except ValueError:
        raise SpecError(FIELD, value, allowed) from None
    if not minimum <= out <= maximum:
        raise SpecError(FIELD, value, allowed)
    return out


def parse_batch_schedule(raw: Any) -> tuple[tuple[int, int, int], ...]:
    """(first batch, last batch, k) per range, from vLLM's dict or the list form; every rule of
    the module docstring checked, each error naming the entry."""
    if isinstance(raw, dict):
        entries = []
        for key, k in raw.items():
            lo, sep, hi = str(key).partition("-")
            if not sep:
                raise SpecError(FIELD, key, f"a range key 'first-last' (e.g. '1-16'); {ALLOWED}")
            entries.append((_whole(lo, f"the first batch of {key!r}", 1), _whole(hi, f"the last batch of {key!r}", 1),
                            _whole(k, f"the draft length of {key!r}", 0, MAX_DRAFT_LENGTH)))
    elif isinstance(raw, (list, tuple)):
        entries = []
        for item in raw:
            if not isinstance(item, (list, tuple)) or len(item) != 3:
                raise SpecError(FIELD, item, f"an entry [first batch, last batch, k]; {ALLOWED}")
            entries.append((_whole(item[0], "a first batch", 1), _whole(item[1], "a last batch", 1),
                            _whole(item[2], "a draft length", 0, MAX_DRAFT_LENGTH)))
    else:
        raise SpecError(FIELD, raw, ALLOWED)
    if not entries:
        raise SpecError(FIELD, raw, "at least one range; " + ALLOWED)
    for (lo0, hi0, _), (lo, hi, _) in zip([(0, 0, 0), *entries], entries):
        if hi < lo:
            raise SpecError(FIELD, f"{lo}-{hi}", f"a range whose last batch is >= its first; {ALLOWED}")
        if lo <= hi0:
            raise SpecError(FIELD, f"{lo0}-{hi0} then {lo}-{hi}", f"ranges sorted by batch and disjoint; {ALLOWED}")
    if entries[0][0] != 1:
        raise SpecError(FIELD, raw, f"a first range that starts at batch 1 (it starts at {entries[0][0]}); {ALLOWED}")
    return tuple(entries)


@dataclass(frozen=True)
class Schedule(SDPolicy):
    """k by the active batch from `table` ((first batch, last batch, k) per range), clamped to k."""

    kind: ClassVar[str] = "schedule"
    fields: ClassVar[tuple[str, ...]] = ("k", "k_per_batch_size")
    batch_dependent: ClassVar[bool] = True

    table: tuple[tuple[int, int, int], ...] = ((1, 1, 0),)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "table", parse_batch_schedule(self.table))

    @property
    def scheduled_ks(self) -> np.ndarray:
        """Each range's k as the engine uses it: min(k, the range's k)."""
        return np.minimum(np.array([k for _, _, k in self.table], dtype=np.int64), self.k)

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(sorted({0, *self.scheduled_ks.tolist()}))

    @property
    def label(self) -> str:
        ranges = ", ".join(f"{lo}-{hi}:{k}" for (lo, hi, _), k in zip(self.table, self.scheduled_ks.tolist()))
        return f"schedule({ranges})"

    def choose(self, n: np.ndarray, rate: np.ndarray | None = None) -> np.ndarray:
        first = np.array([lo for lo, _, _ in self.table])
        idx = np.searchsorted(first, n, side="right") - 1   # the range holding n, or the one before its gap
        return np.where(n > 0, self.scheduled_ks[np.maximum(idx, 0)], 0).astype(np.int64)

    @classmethod
    def from_section(cls, section: Any, tree: Any) -> SDPolicy:
        if section.k_per_batch_size is None:
            raise SpecError(FIELD, None, "given with policy schedule: " + ALLOWED)
        return cls(k=section.k, tree=tree, estimate=getattr(section, "acceptance_estimate", "drafter"),
                   table=parse_batch_schedule(section.k_per_batch_size))
