# imgbuild layer vllm-0.10.0 (kind pip). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0

# A declared torch replacement: the base's torch constraint is lifted for this step only.
RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    PIP_CONSTRAINT= python -m pip install --progress-bar off vllm==0.10.0
RUN mkdir -p /etc/imgbuild \
 && python -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > /etc/imgbuild/constraints.txt \
 && cat /etc/imgbuild/constraints.txt
ENV PIP_CONSTRAINT=/etc/imgbuild/constraints.txt

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="vllm-0.10.0" \
      io.imgbuild.kind="pip"