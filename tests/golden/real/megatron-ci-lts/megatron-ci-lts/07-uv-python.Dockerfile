# imgbuild layer uv-python (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV UV_PYTHON="/opt/venv/bin/python"

LABEL io.imgbuild.layer="uv-python" \
      io.imgbuild.kind="system-setup"