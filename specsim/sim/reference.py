"""The reference engine: one loop iteration per engine step. Slow, obvious, the test oracle.

It implements the semantics in sim/common.py literally: block-granular KV, admission at step
boundaries, recompute preemption of the newest response, per-step sampling of accepted draft
tokens for every sequence.
"""

from __future__ import annotations

import numpy as np

from specsim.sim.common import EngineConfig, EngineResult, EngineWork, PrefillLog, Timeline, check_result
from specsim.speculation import choose_k
from specsim.workload.acceptance import sample_tokens_per_verify


def _blocks(tokens, block: int):
    return -(-np.asarray(tokens, dtype=np.int64) // block)


def run_reference(cfg: EngineConfig, work: EngineWork, rng: np.random.Generator, max_steps: int = 50_000_000) -> EngineResult:
    n = len(work)
    P = work.prompt_tokens.astype(np.int64)
    L = work.response_tokens.astype(np.int64)
    groups = work.group_ids
    blk = cfg.block_tokens
    cap = cfg.capacity_blocks

    gen = np.zeros(n, dtype=np.int64)
    admit_s = np.full(n, np.nan)
    finish_s = np.full(n, np.nan)
    preempt = np.zeros(n, dtype=np.int64)
    queue = list(range(n))  # front = next to admit
    active: list[int] = []  # in admission order
    group_active: dict[int, int] = {}
    tl = Timeline()
    t = 0.0
    steps = sd_steps = seq_steps = sd_seq_steps = sd_tokens = draft_passes = 0
    prefill_total = 0.0
    weighted_active = 0.0
    k = 0
    batch_changed = True

    prompt_blocks = {int(g): int(b) for g, b in zip(groups, _blocks(P, blk))}

    def used_blocks(extra_per_seq: int) -> int:
        if not active:
            return 0
        idx = np.asarray(active)
        gb = sum(prompt_blocks[g] for g in group_active)
        return gb + int(_blocks(gen[idx] + extra_per_seq, blk).sum())

    slots_max = max(cfg.policy.ks) + 1

    def ctx_total() -> float:
        return float((P[active] + gen[active]).sum()) if active else 0.0

    while queue or active:
        # 1. the running batch keeps its k+1 slots per sequence: preempt the newest until it fits
        if batch_changed and active:
            k = choose_k(cfg.policy, cfg.policy_ctx, len(active), ctx_total())
            batch_changed = False
        preempted = False
        while len(active) > 1 and used_blocks(k + 1) > cap:
            j = active.pop()
            g = int(groups[j])
            group_active[g] -= 1
            if group_active[g] == 0:
                del group_active[g]
            preempt[j] += 1
            queue.insert(0, j)
            preempted = True
            k = choose_k(cfg.policy, cfg.policy_ctx, len(active), ctx_total())
        # 2. admission (none at a boundary that preempted), reserving the policy's largest k
        admitted_q, admitted_c = [], []
        while queue and not preempted and len(active) < cfg.max_batch:
            i = queue[0]
            g = int(groups[i])
            need = int(_blocks(gen[i] + slots_max, blk)) + (0 if g in group_active else prompt_blocks[g])
            if active and used_blocks(slots_max) + need > cfg.admission_blocks:
                break
            queue.pop(0)
            if g not in group_active:
                admitted_q.append(P[i] + gen[i])
                admitted_c.append(0)
            elif gen[i] > 0:
                admitted_q.append(gen[i])
                admitted_c.append(P[i])
            group_active[g] = group_active.get(g, 0) + 1
            active.append(i)
            if np.isnan(admit_s[i]):
                admit_s[i] = t
            batch_changed = True
        if admitted_q:
            one_pass = PrefillLog()
            one_pass.add([float(x) for x in admitted_q], [float(x) for x in admitted_c])
            dt = float(one_pass.offsets_s(cfg.prefill_batches_s)[-1])
            t += dt
            prefill_total += dt
        if not active:
            break
        if batch_changed:
            k = choose_k(cfg.policy, cfg.policy_ctx, len(active), ctx_total())
            batch_changed = False
        idx = np.asarray(active)
        nb = len(idx)
        ctx = float((P[idx] + gen[idx]).sum())
        dt = cfg.table.step_s(k, nb, ctx)
        if k > 0:
            emitted = sample_tokens_per_verify(rng, work.alphas[idx], k, cfg.position_decay, cfg.policy.tree_for(k))
        else:
            emitted = np.ones(nb, dtype=np.int64)
        emitted = np.minimum(emitted, L[idx] - gen[idx])
        gen[idx] += emitted
        if cfg.record_timeline:
            kv_tok = used_blocks(0) * blk
            tl.add(t, nb, float(emitted.sum()) / dt, k, kv_tok)
        t += dt
        weighted_active += nb * dt
        steps += 1
        seq_steps += nb
        if k > 0:
            sd_steps += 1
            sd_seq_steps += nb
            sd_tokens += int(emitted.sum())
            draft_passes += k
        done = idx[gen[idx] >= L[idx]]
        if len(done):
            finish_s[done] = t
            done_set = set(done.tolist())
            active = [i for i in active if i not in done_set]
            for i in done:
                g = int(groups[i])
                group_active[g] -= 1
                if group_active[g] == 0:
                    del group_active[g]
            batch_changed = True
        if steps > max_steps:
            raise RuntimeError(f"{cfg.name}: reference engine exceeded {max_steps} steps")
    if cfg.record_timeline:
        tl.add(t, 0, 0.0, k, 0)
    res = EngineResult(cfg.name, work.response_ids, admit_s, finish_s, gen.copy(), preempt, t, steps, sd_steps,
                       seq_steps, sd_seq_steps, sd_tokens, draft_passes, prefill_total, tl.as_arrays(), weighted_active)
    check_result(res, work, cfg)
    return res
