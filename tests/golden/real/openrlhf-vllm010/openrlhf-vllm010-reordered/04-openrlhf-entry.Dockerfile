# imgbuild layer openrlhf-entry (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY --chmod=0755 inputs/6861c8f5260649c6211a704b0500cacb0eeceef1fa3a5d3b8f3e591a914dc585 /app/docker-entrypoint.sh
WORKDIR /app
ENTRYPOINT ["/app/docker-entrypoint.sh"]

LABEL io.imgbuild.layer="openrlhf-entry" \
      io.imgbuild.kind="system-setup"