# imgbuild layer nemo-system (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- bc libsox-fmt-all \
 && rm -rf /var/lib/apt/lists/*
ENV HYDRA_FULL_ERROR="1" \
    PYTHONUNBUFFERED="1" \
    TRANSFORMERS_OFFLINE="0"
WORKDIR /workspace

LABEL io.imgbuild.layer="nemo-system" \
      io.imgbuild.kind="system-setup" \
      nemo.library="nemo-core"