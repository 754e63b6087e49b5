# imgbuild layer unit-test-venv (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN python3 -m venv /opt/unit-test-venv
ENV VIRTUAL_ENV=/opt/unit-test-venv \
    PATH="/opt/unit-test-venv/bin${PATH:+:${PATH}}"

LABEL io.imgbuild.layer="unit-test-venv" \
      io.imgbuild.kind="system-setup"