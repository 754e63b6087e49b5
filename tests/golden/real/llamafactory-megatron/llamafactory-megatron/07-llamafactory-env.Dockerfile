# imgbuild layer llamafactory-env (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV API_PORT="8000" \
    GRADIO_SERVER_PORT="7860" \
    JAVA_HOME="/usr/lib/jvm/java-21-openjdk-amd64"
WORKDIR /app

LABEL io.imgbuild.layer="llamafactory-env" \
      io.imgbuild.kind="system-setup"