# imgbuild layer verl-apt (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- systemd tini \
 && rm -rf /var/lib/apt/lists/*

LABEL io.imgbuild.layer="verl-apt" \
      io.imgbuild.kind="system-setup"