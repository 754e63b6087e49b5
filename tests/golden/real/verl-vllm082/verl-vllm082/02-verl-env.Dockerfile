# imgbuild layer verl-env (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV DEBIAN_FRONTEND="noninteractive" \
    HF_HUB_ENABLE_HF_TRANSFER="1" \
    MAX_JOBS="32" \
    NODE_OPTIONS="" \
    VLLM_WORKER_MULTIPROC_METHOD="spawn"

LABEL io.imgbuild.layer="verl-env" \
      io.imgbuild.kind="system-setup"