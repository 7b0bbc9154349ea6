"""The GPU kernel collector: times a catalog model's forward passes on real hardware into a
kernel trace (`specsim calibrate collect`; needs the `collect` extra, i.e. torch). torch is
imported only when a collection runs, so importing specsim never needs it."""
