# imgbuild layer lts-requirements (kind pip). Rendered from Dockerfile.j2; do not edit.
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
    python -m pip install --progress-bar off av==17.0.1 datasets==4.8.5 einops==0.8.2 'emerging_optimizers @ git+https://github.com/NVIDIA-NeMo/Emerging-Optimizers.git@832ae495178be2b24e7d69807df98b3ad86171ab' fastapi==0.136.3 flashinfer-python==0.6.11.post3 'megatron-energon[av_decode]==7.3.2' multi-storage-client==0.49.0 nvidia-resiliency-ext==0.6.0 onnxscript==0.7.0 opentelemetry-api==1.33.1 tensorstore==0.1.84 tqdm==4.67.3 wget==3.2 zstandard==0.25.0

LABEL io.imgbuild.layer="lts-requirements" \
      io.imgbuild.kind="pip"