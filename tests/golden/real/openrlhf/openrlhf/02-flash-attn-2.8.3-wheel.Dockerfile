# imgbuild layer flash-attn-2.8.3-wheel (kind pip). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0

RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    python -m pip install --progress-bar off 'flash_attn @ https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.7.16/flash_attn-2.8.3+cu130torch2.9-cp312-cp312-linux_x86_64.whl'

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="flash-attn-2.8.3-wheel" \
      io.imgbuild.kind="pip"