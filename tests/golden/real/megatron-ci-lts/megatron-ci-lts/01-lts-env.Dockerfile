# imgbuild layer lts-env (kind system-setup). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- gettext python3-venv psmisc uuid-runtime \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/jet
COPY --chmod=0755 downloads/6dc2d0cd4e0caca5aeffd0d784a48263591080e4a0895abe69f3a76eb50d1ba3 /usr/local/bin/yq
ENV DEBIAN_FRONTEND="noninteractive" \
    NVTE_BUILD_NUM_PHILOX_ROUNDS="3" \
    PATH="/opt/venv/bin:/root/.local/bin${PATH:+:${PATH}}" \
    UV_LINK_MODE="copy" \
    UV_PROJECT_ENVIRONMENT="/opt/venv" \
    VIRTUAL_ENV="/opt/venv"

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="lts-env" \
      io.imgbuild.kind="system-setup"