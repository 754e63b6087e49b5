# imgbuild layer megatron-core-0.17 (kind megatron). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY sources/source /opt/Megatron-LM
RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    cd /opt/Megatron-LM \
 && python -m pip install --progress-bar off --no-build-isolation --no-deps . \
 && python -c 'import megatron.core, sys; print("megatron.core from", megatron.core.__file__)'

LABEL io.imgbuild.layer="megatron-core-0.17" \
      io.imgbuild.kind="megatron" \
      io.imgbuild.source.source="https://github.com/NVIDIA/Megatron-LM.git@9539a12e1b04a68423f57b3eb41d6125161dca24"