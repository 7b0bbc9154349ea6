"""The kernel-table fit (`specsim calibrate kernels`): a profile's roofline terms fitted to measured
kernel tables, its engine overheads to measured end-to-end TPOT rows.

    tables.py           locate and read aiconfigurator-core's kernel tables (SI units)
    terms.py            one bounded robust fit per roofline term (GEMM, decode attention, MoE, all-reduce)
    system.py           every term of one GPU system (`fit_system`) and its provenance
    tpot_model.py       a closed-loop TPOT row priced as the engine's mixed steps
    engine_overhead.py  step and per-sequence overheads fitted to the TPOT fit split, the rest predicted
    report.py           the whole run (`calibrate_from_kernels`): fit, predict held out, write profiles
    describe.py         the data `specsim calibrate kernels` and `specsim show hardware` print

Which GPU's tables are read, and which GPU's overheads a GPU without TPOT rows borrows, are keys
of its hardware profile (`kernel_tables:` in specsim/catalog/hardware_profiles/*.yaml).
"""
