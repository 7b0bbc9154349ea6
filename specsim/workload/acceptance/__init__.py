"""Drafter acceptance: per-position laws, draft shapes (chain, tree, top-k tree), the per-response population, staleness and context dependence."""
