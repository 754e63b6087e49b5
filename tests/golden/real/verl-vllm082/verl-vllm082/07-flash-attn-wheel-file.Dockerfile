# imgbuild layer flash-attn-wheel-file (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY --chmod=0644 downloads/sha256-not-locked-yet /workspace/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp310-cp310-linux_x86_64.whl

LABEL io.imgbuild.layer="flash-attn-wheel-file" \
      io.imgbuild.kind="system-setup"