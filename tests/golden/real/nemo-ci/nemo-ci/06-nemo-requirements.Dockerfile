# imgbuild layer nemo-requirements (kind pip). Rendered from Dockerfile.j2; do not edit.
ARG PARENT
FROM ${PARENT}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# One time for every file this layer writes (docs/reproducible.md): pip compiles checked-hash .pyc, and an
# engine that can fix file times (Buildah --timestamp) stamps the layer with it. From site.source_date_epoch.
# One hash seed for every Python the build runs: a set a setup.py iterates (DeepSpeed's extras) is then
# written in one order. Both are build arguments: in the key, never in the image's environment.
ARG SOURCE_DATE_EPOCH=315532800
ARG PYTHONHASHSEED=0

# Files of https://github.com/NVIDIA/NeMo.git at 0021db277ae2, bound at /workspace for this command only.
RUN --mount=type=bind,source=sources/tree/requirements,target=/workspace/requirements \
    --mount=type=bind,source=sources/tree/tools,target=/workspace/tools \
    --mount=type=bind,source=sources/tree/setup.py,target=/workspace/setup.py \
    --mount=type=bind,source=sources/tree/nemo/package_info.py,target=/workspace/nemo/package_info.py \
    --mount=type=bind,source=sources/tree/nemo/__init__.py,target=/workspace/nemo/__init__.py \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    export MAMBA_FORCE_BUILD=TRUE; \
    cd /workspace && python -m pip install --progress-bar off --no-build-isolation --extra-index-url https://pypi.nvidia.com 'apex @ git+https://github.com/NVIDIA/apex.git@810ffae374a2b9cb4b5c5e28eaeca7d7998fca0c' llama-index==0.10.43 'megatron_core @ git+https://github.com/NVIDIA/Megatron-LM.git@213c8a23fa9fe95d19eff0932a1e6e71767f0962' 'nvidia-modelopt[torch]~=0.17.0' 'onnxscript @ git+https://github.com/microsoft/onnxscript' unstructured==0.14.9 -r tools/ctc_segmentation/requirements.txt '.[all]'

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="nemo-requirements" \
      io.imgbuild.kind="pip" \
      io.imgbuild.source.tree="https://github.com/NVIDIA/NeMo.git@0021db277ae20cd6b17ecb4f0e630d7fa26dd836"