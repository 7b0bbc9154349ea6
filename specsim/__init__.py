"""specsim: a calibrated discrete-event simulator of speculative decoding in RL post-training rollouts."""

__version__ = "0.1.0"
