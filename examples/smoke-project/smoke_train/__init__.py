"""A few training steps of a tiny model with DeepSpeed's prebuilt CPU Adam."""

REVISION = 1
