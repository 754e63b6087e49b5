# imgbuild layer nemo-mcore (kind pip). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    python -m pip install --progress-bar off 'megatron_core @ git+https://github.com/NVIDIA/Megatron-LM.git@a3fe0c75df82218901fa2c3a7c9e389aa5f53182' 'nemo_toolkit[nlp] @ git+https://github.com/NVIDIA/NeMo.git@e033481e26e6ae32764d3e2b3f16afed00dc7218'

LABEL io.imgbuild.layer="nemo-mcore" \
      io.imgbuild.kind="pip"