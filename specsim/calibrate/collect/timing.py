"""The collector's torch side: a random-weight decoder stack (Runner) and the pass timer (time_fn).

torch is passed in by the caller (collector.py imports it only when it runs),
so importing this module needs no torch. See collector.py's docstring for what is built and timed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass
class Shape:
    """One timed pass shape: op, batch, new tokens per sequence q, cached context per sequence."""

    op: str
    batch: int
    q: int
    ctx: int


class Runner:
    """Random-weight decoder stack in plain torch tensors (no nn.Module, no autograd)."""

    def __init__(self, torch, spec, n_layers: int, device, dtype, draft_spec=None, seed: int = 0):
        self.torch, self.spec, self.n_layers, self.device, self.dtype = torch, spec, n_layers, device, dtype
        self.F = torch.nn.functional
        torch.manual_seed(seed)
        self.layers = [self._layer(spec) for _ in range(n_layers)]
        h, v = spec.hidden, spec.vocab
        self.embed = self._w(v, h)
        self.final_norm = torch.ones(h, device=device, dtype=dtype)
        self.lm_head = self.embed.t() if spec.tied_embeddings else self._w(h, v)
        self.qk_norm = spec.name.lower().startswith("qwen3") or spec.name == "tiny"
        self.draft = None
        if draft_spec is not None:
            self.draft_spec = draft_spec
            self.draft = {
                "fc": self._w(3 * h, h),
                "layer": self._layer(draft_spec),
                "norm": torch.ones(h, device=device, dtype=dtype),
                "head": self._w(h, draft_spec.vocab),
            }
        try:
            q = torch.zeros(1, 2, 1, 4, device=device, dtype=dtype)
            kv = torch.zeros(1, 1, 2, 4, device=device, dtype=dtype)
            self.F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
            self.gqa_native = True
        except (TypeError, RuntimeError):
            self.gqa_native = False

    def _w(self, *shape):
        t = self.torch.empty(*shape, device=self.device, dtype=self.dtype)
        return t.normal_(0.0, 0.02)

    def _layer(self, spec):
        torch, h, d = self.torch, spec.hidden, spec.head_dim
        qkv = (spec.heads + 2 * spec.kv_heads) * d
        layer = {
            "ln1": torch.ones(h, device=self.device, dtype=self.dtype),
            "wqkv": self._w(h, qkv),
            "wo": self._w(spec.heads * d, h),
            "ln2": torch.ones(h, device=self.device, dtype=self.dtype),
            "wgu": self._w(h, 2 * spec.ffn),
            "wd": self._w(spec.ffn, h),
            "qn": torch.ones(d, device=self.device, dtype=self.dtype),
            "kn": torch.ones(d, device=self.device, dtype=self.dtype),
        }
        if spec.qkv_bias:
            layer["bqkv"] = torch.zeros(qkv, device=self.device, dtype=self.dtype)
        return layer

    def kv_bytes(self, shape: Shape, layers: int | None = None) -> float:
        s = self.spec
        n = self.n_layers if layers is None else layers
        return n * 2.0 * shape.batch * s.kv_heads * (shape.ctx + shape.q) * s.head_dim * self._elt()

    def act_bytes(self, shape: Shape) -> float:
        s = self.spec
        tokens = shape.batch * shape.q
        logits = shape.batch * (1 if shape.op == "prefill" else shape.q) * s.vocab
        attn = shape.batch * s.heads * shape.q * (shape.ctx + shape.q) if shape.q > 1 else 0  # mask / math fallback
        return (
            (tokens * (4 * s.hidden + 3 * s.ffn + (s.heads + 2 * s.kv_heads) * s.head_dim) + logits + attn)
            * self._elt()
            * 2
        )

    def _elt(self) -> float:
        return 2.0

    def alloc_cache(self, shape: Shape, layers: int):
        t, s = self.torch, self.spec
        return [
            (
                t.zeros(shape.batch, s.kv_heads, shape.ctx + shape.q, s.head_dim, device=self.device, dtype=self.dtype),
                t.zeros(shape.batch, s.kv_heads, shape.ctx + shape.q, s.head_dim, device=self.device, dtype=self.dtype),
            )
            for _ in range(layers)
        ]

    def _rms(self, x, w):
        x32 = x.float()
        return (x32 * self.torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def _mask(self, q: int, ctx: int):
        if q == 1 or ctx == 0:
            return None
        i = self.torch.arange(q, device=self.device)[:, None]
        j = self.torch.arange(ctx + q, device=self.device)[None, :]
        return j <= ctx + i

    def _block(self, x, layer, spec, cache, ctx: int, mask):
        F = self.F
        b, q, _ = x.shape
        d, nh, nkv = spec.head_dim, spec.heads, spec.kv_heads
        y = self._rms(x, layer["ln1"]) @ layer["wqkv"]
        if "bqkv" in layer:
            y = y + layer["bqkv"]
        qh, kh, vh = y.split([nh * d, nkv * d, nkv * d], dim=-1)
        qh = qh.view(b, q, nh, d).transpose(1, 2)
        kh = kh.view(b, q, nkv, d).transpose(1, 2)
        vh = vh.view(b, q, nkv, d).transpose(1, 2)
        if self.qk_norm:
            qh, kh = self._rms(qh, layer["qn"]), self._rms(kh, layer["kn"])
        kc, vc = cache
        kc[:, :, ctx : ctx + q].copy_(kh)
        vc[:, :, ctx : ctx + q].copy_(vh)
        keys, values = kc, vc
        causal = ctx == 0 and q > 1
        if self.gqa_native:
            a = F.scaled_dot_product_attention(qh, keys, values, attn_mask=mask, is_causal=causal, enable_gqa=nh != nkv)
        else:
            rep = nh // nkv
            keys = keys[:, :, None].expand(b, nkv, rep, ctx + q, d).reshape(b, nh, ctx + q, d)
            values = values[:, :, None].expand(b, nkv, rep, ctx + q, d).reshape(b, nh, ctx + q, d)
            a = F.scaled_dot_product_attention(qh, keys, values, attn_mask=mask, is_causal=causal)
        x = x + a.transpose(1, 2).reshape(b, q, nh * d) @ layer["wo"]
        gu = self._rms(x, layer["ln2"]) @ layer["wgu"]
        g, u = gu.chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ layer["wd"]

    def callables(self, shape: Shape, split: bool):
        """{part: fn} for one shape; parts 'full' or 'layers' + 'rest' (when only N of L layers are built)."""
        torch, s = self.torch, self.spec
        b, q, ctx = shape.batch, shape.q, shape.ctx
        tokens = torch.randint(0, s.vocab, (b, q), device=self.device)
        mask = self._mask(q, ctx)
        n_logits = 1 if shape.op == "prefill" else q
        if shape.op == "draft":
            dr = self.draft
            cache = self.alloc_cache(shape, 1)
            feats = torch.randn(b, 1, 3 * s.hidden, device=self.device, dtype=self.dtype)

            def draft():
                x = feats @ dr["fc"]
                x = self._block(x, dr["layer"], self.draft_spec, cache[0], ctx, None)
                return self._rms(x, dr["norm"]) @ dr["head"]

            return {"full": draft}, self.kv_bytes(shape, 1)
        caches = self.alloc_cache(shape, self.n_layers)
        x0 = torch.randn(b, q, s.hidden, device=self.device, dtype=self.dtype)

        def layers_only():
            x = x0
            for layer, cache in zip(self.layers, caches):
                x = self._block(x, layer, s, cache, ctx, mask)
            return x

        def rest():
            x = torch.nn.functional.embedding(tokens, self.embed)
            x = self._rms(x[:, -n_logits:] + x0[:, -n_logits:], self.final_norm)
            return x @ self.lm_head

        def full():
            x = torch.nn.functional.embedding(tokens, self.embed)
            for layer, cache in zip(self.layers, caches):
                x = self._block(x, layer, s, cache, ctx, mask)
            return self._rms(x[:, -n_logits:], self.final_norm) @ self.lm_head

        parts = {"layers": layers_only, "rest": rest} if split else {"full": full}
        return parts, self.kv_bytes(shape)


def time_fn(torch, fn, device: str, warmup: int, repeats: int, graphs: bool) -> tuple[float, bool]:
    """Median seconds of `fn` (CUDA events on GPU); captured in a CUDA graph when `graphs`."""
    cuda = device.startswith("cuda")
    used_graph = False
    run = fn
    with torch.inference_mode():
        if cuda and graphs:
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(max(warmup, 1)):
                        fn()
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn()
                run = graph.replay
                used_graph = True
            except Exception as exc:  # noqa: BLE001 - capture fails with many torch error types; time eager
                print(f"    (CUDA graph capture failed: {exc.__class__.__name__}; timing eager)", flush=True)
                run = fn
        for _ in range(warmup):
            run()
        times = []
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(repeats):
                start.record()
                run()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
        else:
            for _ in range(repeats):
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
    return statistics.median(times), used_graph
