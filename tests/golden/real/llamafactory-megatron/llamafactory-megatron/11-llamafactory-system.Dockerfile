# imgbuild layer llamafactory-system (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- zip openjdk-21-jdk \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME="/usr/lib/jvm/java-21-openjdk-amd64"
WORKDIR /app

LABEL io.imgbuild.layer="llamafactory-system" \
      io.imgbuild.kind="system-setup"