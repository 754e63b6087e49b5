# imgbuild layer nemo-env (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV HYDRA_FULL_ERROR="1" \
    PYTHONUNBUFFERED="1" \
    TRANSFORMERS_OFFLINE="0"
WORKDIR /workspace

LABEL io.imgbuild.layer="nemo-env" \
      io.imgbuild.kind="system-setup"