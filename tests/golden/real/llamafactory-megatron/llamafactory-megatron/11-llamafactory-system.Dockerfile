# imgbuild layer llamafactory-system (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# apt's sources point at a mirror from here on (the suites and keys of the distribution kept).
RUN for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do \
      if [ -f "$f" ]; then sed -i -E 's#https?://(deb\.debian\.org|archive\.ubuntu\.com|security\.ubuntu\.com|ports\.ubuntu\.com)/(debian-security|debian|ubuntu-ports|ubuntu)/?#'https://mirrors.tuna.tsinghua.edu.cn'/\2/#g' "$f"; fi; \
    done \
 && grep -rqsF -- https://mirrors.tuna.tsinghua.edu.cn /etc/apt/sources.list /etc/apt/sources.list.d/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- zip openjdk-21-jdk \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME="/usr/lib/jvm/java-21-openjdk-amd64"
WORKDIR /app

LABEL io.imgbuild.layer="llamafactory-system" \
      io.imgbuild.kind="system-setup"