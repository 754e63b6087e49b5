# imgbuild layer llamafactory-ports (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV API_PORT="8000" \
    GRADIO_SERVER_PORT="7860" \
    http_proxy="" \
    https_proxy=""
EXPOSE 7860 8000

LABEL io.imgbuild.layer="llamafactory-ports" \
      io.imgbuild.kind="system-setup"