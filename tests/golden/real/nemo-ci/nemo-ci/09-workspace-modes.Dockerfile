# imgbuild layer workspace-modes (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN chmod -R 0777 /workspace

LABEL io.imgbuild.layer="workspace-modes" \
      io.imgbuild.kind="system-setup"