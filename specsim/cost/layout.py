"""Parallel layout of one model replica (a rollout engine or the trainer's model-parallel group)."""

from __future__ import annotations

from dataclasses import dataclass

from specsim.catalog.hardware import DTYPE_BYTES
from specsim.errors import SpecError


@dataclass(frozen=True)
class ParallelLayout:
    """How one replica is split over GPUs.

    tp: tensor parallel degree (attention heads, dense FFN, LM head, and MoE experts when ep=1).
    pp: pipeline stages (layers split evenly; a pass runs the stages one after another).
    ep: expert parallel degree. ep=1 keeps experts TP-sharded (all-reduce after the MoE). ep>1
        spreads whole experts over `ep` GPUs and moves tokens with all-to-all (dispatch+combine);
        when ep > tp, attention runs data-parallel over ep/tp groups of tp GPUs (DP-attention,
        as wide-EP deployments of SGLang/vLLM do), each group holding its share of the sequences.
    A replica spans max(tp, ep)·pp GPUs.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    expert_weight_dtype: str | None = None   # the routed experts' own dtype (gpt-oss mxfp4: fp4 experts, bf16 rest)

    def __post_init__(self):
        for name in ("tp", "pp", "ep"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(name, v, "a whole number >= 1")
        if self.ep > 1 and self.ep % self.tp != 0:
            raise SpecError("ep", self.ep, f"1 or a multiple of tp={self.tp}")
        for name in ("weight_dtype", "kv_dtype", "act_dtype", "expert_weight_dtype"):
            v = getattr(self, name)
            if v not in DTYPE_BYTES and not (name == "expert_weight_dtype" and v is None):
                raise SpecError(name, v, f"one of {sorted(DTYPE_BYTES)}")

    @property
    def gpus(self) -> int:
        return max(self.tp, self.ep) * self.pp

    @property
    def attn_dp(self) -> int:
        """Data-parallel attention groups inside the replica (1 unless ep > tp)."""
        return max(1, self.ep // self.tp)

    @property
    def weight_bytes(self) -> float:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def kv_bytes(self) -> float:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def act_bytes(self) -> float:
        return DTYPE_BYTES[self.act_dtype]

    @property
    def degrees(self) -> str:
        """'TP=4 EP=4 PP=2', leaving out degrees of 1 except TP."""
        parts = [f"TP={self.tp}"]
        if self.ep > 1:
            parts.append(f"EP={self.ep}")
        if self.pp > 1:
            parts.append(f"PP={self.pp}")
        return " ".join(parts)

    def describe(self) -> str:
        experts = f", {self.expert_weight_dtype} experts" if self.expert_weight_dtype else ""
        return f"{self.degrees} ({self.gpus} GPUs, {self.weight_dtype} weights{experts})"

    def check_fits_model(self, model, section: str) -> None:
        """Raise SpecError (field `section.tp|ep|pp`) when this split cannot exist for `model`:
        EP on a dense model, more EP ranks than experts, TP not dividing the heads, PP above the layers."""
        if model.moe is None and self.ep > 1:
            raise SpecError(f"{section}.ep", self.ep, f"1 for the dense model {model.name}")
        if model.moe is not None and self.ep > model.moe.experts:
            raise SpecError(f"{section}.ep", self.ep, f"<= the {model.moe.experts} experts of {model.name}")
        if model.heads % self.tp:
            raise SpecError(f"{section}.tp", self.tp, f"a divisor of the {model.heads} attention heads of {model.name}")
        if self.pp > model.layers:
            raise SpecError(f"{section}.pp", self.pp, f"<= the {model.layers} layers of {model.name}")
