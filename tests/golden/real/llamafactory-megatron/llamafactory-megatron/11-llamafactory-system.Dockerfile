# imgbuild layer llamafactory-system (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0

# apt's sources.list written whole, a line per suite; the file it replaces kept as sources.list.bak.
RUN { [ ! -f /etc/apt/sources.list ] || cp /etc/apt/sources.list /etc/apt/sources.list.bak; } \
 && printf '%s\n' 'deb https://mirrors.tuna.tsinghua.edu.cn/ubuntu/ jammy main restricted universe multiverse' 'deb https://mirrors.tuna.tsinghua.edu.cn/ubuntu/ jammy-security main restricted universe multiverse' 'deb https://mirrors.tuna.tsinghua.edu.cn/ubuntu/ jammy-updates main restricted universe multiverse' 'deb https://mirrors.tuna.tsinghua.edu.cn/ubuntu/ jammy-backports main restricted universe multiverse' > /etc/apt/sources.list
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- zip openjdk-21-jdk \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME="/usr/lib/jvm/java-21-openjdk-amd64"
WORKDIR /app

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="llamafactory-system" \
      io.imgbuild.kind="system-setup"