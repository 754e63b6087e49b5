# imgbuild layer verl-env (kind runtime-env). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV HF_HUB_ENABLE_HF_TRANSFER="1" \
    NODE_OPTIONS="" \
    VLLM_WORKER_MULTIPROC_METHOD="spawn"

LABEL io.imgbuild.layer="verl-env" \
      io.imgbuild.kind="runtime-env"