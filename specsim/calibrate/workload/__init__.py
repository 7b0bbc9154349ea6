"""The workload fit (`specsim calibrate workload`): the free parameters a target file's `fit:` block
names (workload unknowns, trainer efficiencies, SD overheads), fitted stage by stage to that
file's `fit` rows by simulating them, then written back into the scenarios (and, on request, the
hardware profile).

    fit.py         the fit (`fit_file`): parameters, residuals ln(simulated / measured), least squares
    write_back.py  fitted values into scenario files (comments kept) and profiles
    run.py         the two in order, for the command (`run_workload_fit`)

Which target file is fitted is the caller's: the command takes `--targets` (default: the
`targets/nemo_rl_8b.yaml` of the calibration folder found from the working directory).
"""
