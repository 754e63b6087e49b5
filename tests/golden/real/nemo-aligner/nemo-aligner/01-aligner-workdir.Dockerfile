# imgbuild layer aligner-workdir (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

WORKDIR /opt

LABEL io.imgbuild.layer="aligner-workdir" \
      io.imgbuild.kind="system-setup"