"""imgbuild: turn one declared stacks.yaml into pinned, validated, layered training images."""

__version__ = "0.1.0"
