"""The trace fit (`specsim calibrate traces`): a hardware profile's efficiency factors, a drafter's
acceptance and the response lengths fitted to measured traces, and the trace formats it reads
(schema.py, parse.py, io.py; `specsim calibrate collect` writes the kernel kind).

A hardware profile's efficiency factors are *fitted* to measured traces (calibration/README.md,
"Fit procedure"); published results are validation targets, never inputs.

Hardware (:func:`fit_hardware`). Unknowns, with bounds:
    compute, memory, comm in [0.05, 1]          achieved fraction of peak (roofline, collectives)
    step_overhead_s, per_seq_overhead_s,         fixed engine-step time, per running sequence,
    draft_overhead_s >= 0                        per draft pass
Each kernel-trace row (one measured forward pass) is predicted by the cost model,
`pass_cost(model, hw', layout, batch, q, logits)` at total context batch*ctx_per_seq -- decode and
verify with logits for every new token, prefill with one logit per sequence (for uniform prompts
this equals `prefill_time_s` exactly), draft rows by `draft_cost` of the drafter -- and carries no
scheduler overhead. Each engine-trace row (one engine step) is predicted by
`step_cost(model, drafter, hw', layout, active_batch, k).time_s(total_context_tokens)`, which adds
the three overheads. The residual of a row is ln(predicted / measured); scipy's bounded
`least_squares` (trust-region reflective, soft-L1 loss with a 10 % scale so a few outlier steps do
not drag the fit) minimises them jointly over every row. A parameter the data cannot determine
keeps its prior and is reported "not fitted", with the reason:
    comm               no row with tp, ep or pp > 1, or collectives too small to matter
    step_overhead_s    no engine rows (kernel rows have no scheduler overhead)
    per_seq_overhead_s engine rows at fewer than two batch sizes
    draft_overhead_s   no engine rows with k > 0 (or only n-gram drafting)
    compute / memory   no row's time depends on it (e.g. every op memory-bound)
    train_mfu          never (kernel and engine traces do not time training)
Standard errors come from the Jacobian at the optimum; relative residuals are pred/meas - 1.

Acceptance (:func:`fit_acceptance`): per speculative step tau = tokens_emitted / active_batch;
tau(alpha, k, decay) = 1 + sum_j alpha^j decay^(j(j-1)/2) (workload.acceptance) is fitted by
weighted least squares (weight = active_batch) across all k; the position decay is fitted only
when at least two k values are present. With an `rl_step` column spanning >= 3 steps, staleness
alpha(v) = floor + (alpha0 - floor) exp(-rate v) (v = rl_step) is fitted jointly.

Lengths (:func:`fit_lengths`): a thin wrapper over :func:`specsim.workload.lengths.fit`.
"""
from specsim.calibrate.traces.acceptance_fit import AcceptanceFit, fit_acceptance, fit_lengths
from specsim.calibrate.traces.common import PARAMS
from specsim.calibrate.traces.hardware_fit import HardwareFit, drop_confounded, fit_hardware  # noqa: F401 (tests)
from specsim.calibrate.traces.profile import write_calibrated_profile
from specsim.calibrate.traces.reporting import CalibrationReport, calibrate

__all__ = [
    "PARAMS",
    "AcceptanceFit",
    "CalibrationReport",
    "HardwareFit",
    "calibrate",
    "fit_acceptance",
    "fit_hardware",
    "fit_lengths",
    "write_calibrated_profile",
]
