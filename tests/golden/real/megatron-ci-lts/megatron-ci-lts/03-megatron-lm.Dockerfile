# imgbuild layer megatron-lm (kind megatron). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0
# Target GPUs: one arch list, spelled for each build tool (TORCH_CUDA_ARCH_LIST, TE, CMake).
ARG TORCH_CUDA_ARCH_LIST="8.0;9.0;10.0"
ARG NVTE_CUDA_ARCHS="80;90;100"
ARG CMAKE_CUDA_ARCHITECTURES="80;90;100"

COPY sources/source /workspace
RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    cd /workspace \
 && { if [ -n "${PIP_INDEX_URL:-}" ]; then export UV_DEFAULT_INDEX="$PIP_INDEX_URL"; fi; } \
 && uv venv /opt/venv --system-site-packages \
 && UV_PROJECT_ENVIRONMENT=/opt/venv uv sync --locked --link-mode copy --no-cache --only-group build \
 && UV_PROJECT_ENVIRONMENT=/opt/venv uv sync --locked --link-mode copy --no-cache --extra mlm --extra ssm --extra te --no-install-package torch --no-install-package torchvision --no-install-package triton --no-install-package transformer-engine-cu12 --no-install-package nvidia-cublas-cu12 --no-install-package nvidia-cuda-cupti-cu12 --no-install-package nvidia-cuda-nvrtc-cu12 --no-install-package nvidia-cuda-runtime-cu12 --no-install-package nvidia-cudnn-cu12 --no-install-package nvidia-cufft-cu12 --no-install-package nvidia-cufile-cu12 --no-install-package nvidia-curand-cu12 --no-install-package nvidia-cusolver-cu12 --no-install-package nvidia-cusparse-cu12 --no-install-package nvidia-cusparselt-cu12 --no-install-package nvidia-nccl-cu12 \
 && python -m pip install --progress-bar off -r docker/lts/requirements.txt \
 && /opt/venv/bin/python -c 'import megatron.core, sys; print("megatron.core from", megatron.core.__file__)'
ENV VIRTUAL_ENV=/opt/venv \
    PATH="/opt/venv/bin${PATH:+:${PATH}}"

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="megatron-lm" \
      io.imgbuild.kind="megatron" \
      io.imgbuild.cuda-arch-list="8.0;9.0;10.0" \
      io.imgbuild.source.source="https://github.com/NVIDIA/Megatron-LM.git@0676badd513595300d9404493fd0505ca89fbc3d"