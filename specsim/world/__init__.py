"""The world: a scenario resolved into frozen run-time specs (model, hardware, layouts, workload, drafter, SD policy, pipeline) that sim/ runs."""
