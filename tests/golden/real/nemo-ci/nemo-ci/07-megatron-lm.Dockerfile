# imgbuild layer megatron-lm (kind megatron). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY sources/source /workspace/Megatron-LM
ENV PYTHONPATH="/workspace/Megatron-LM${PYTHONPATH:+:${PYTHONPATH}}"
RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    cd /workspace/Megatron-LM \
 && make -C megatron/core/datasets \
 && python -c 'import megatron.core, sys; print("megatron.core from", megatron.core.__file__)'

LABEL io.imgbuild.layer="megatron-lm" \
      io.imgbuild.kind="megatron" \
      io.imgbuild.source.source="https://github.com/NVIDIA/Megatron-LM.git@213c8a23fa9fe95d19eff0932a1e6e71767f0962"