# imgbuild layer dev-env (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- gettext python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/jet
COPY --chmod=0755 downloads/6dc2d0cd4e0caca5aeffd0d784a48263591080e4a0895abe69f3a76eb50d1ba3 /usr/local/bin/yq
ENV DEBIAN_FRONTEND="noninteractive" \
    PATH="/opt/venv/bin:/root/.local/bin${PATH:+:${PATH}}" \
    UV_LINK_MODE="copy" \
    UV_PROJECT_ENVIRONMENT="/opt/venv"

LABEL io.imgbuild.layer="dev-env" \
      io.imgbuild.kind="system-setup"