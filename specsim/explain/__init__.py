"""What `specsim show` and `specsim check` compute: model, drafter, length and tree reports; a scenario's check report and warnings."""
