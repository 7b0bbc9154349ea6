"""Calibration: fit the simulator's free terms to measurements, one pipeline per folder.

Nothing here knows any published number or any dataset's location: every pipeline takes the files
it fits as arguments (the CLI discovers the defaults from the working directory's `calibration/`
folder, specsim.validate.targets.find_calibration_dir). Published results are validation targets
(calibration/targets/) that a fit must reproduce, never inputs. The recipes that know one
published dataset live beside their data, in calibration/recipes/ (docs/calibration.md).

    traces/      the trace fit (`specsim calibrate traces`): efficiency factors, acceptance and
                 lengths fitted to kernel / engine / lengths / stage traces; the trace formats
    kernels/     the kernel-table fit (`specsim calibrate kernels`): roofline terms fitted to
                 measured kernel tables, engine overheads to measured TPOT rows; `show hardware`
    workload/    the workload fit (`specsim calibrate workload`): a target file's `fit:` block
                 fitted to published stage times by simulating, and written back
    acceptance/  the acceptance-shape fit: one Beta concentration and position decay fitted to
                 published acceptance curves (run by calibration/recipes/acceptance_shape.py)
    collect/     the collector (`specsim calibrate collect`): kernel traces timed on this GPU
    forward_sweep.py, a100_sweep.py   in-engine forward-pass sweeps (`specsim calibrate a100-sweep`)

The pipelines share no code beyond the trace formats (traces/schema.py, io.py), which the
collector writes and the trace fit reads.
"""
