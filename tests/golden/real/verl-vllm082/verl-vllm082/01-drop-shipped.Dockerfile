# imgbuild layer drop-shipped (kind pip). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Removes packages the parent ships; the reason is in stacks.yaml and in `imgbuild plan --explain`.
RUN python -m pip uninstall -y pytorch-quantization pytorch-triton torch torch-tensorrt torchvision xgboost transformer_engine flash_attn apex megatron-core

LABEL io.imgbuild.layer="drop-shipped" \
      io.imgbuild.kind="pip"