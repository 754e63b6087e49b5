# imgbuild layer trtllm-ld-path (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH}:}/usr/local/cuda-12/compat/lib.real"

LABEL io.imgbuild.layer="trtllm-ld-path" \
      io.imgbuild.kind="system-setup"