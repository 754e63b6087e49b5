# imgbuild layer ds-0.19.5-hopper (kind deepspeed). Rendered from Dockerfile.j2; do not edit.
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
ARG TORCH_CUDA_ARCH_LIST="9.0"
ARG NVTE_CUDA_ARCHS="90"
ARG CMAKE_CUDA_ARCHITECTURES="90"

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -- libaio-dev \
 && rm -rf /var/lib/apt/lists/*
# Ops compiled now rather than JIT-compiled on every node at first use.
# On a build host without a GPU, DeepSpeed picks its CPU accelerator and silently builds no CUDA op
# (ds_report: fused_adam "installed NO"); so the accelerator is named, for the build and the image.
ENV DS_ACCELERATOR=cuda
RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    --mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    --mount=type=cache,id=imgbuild-pip,target=/root/.cache/pip,sharing=locked \
    rm -rf /root/.cache/pip/wheels; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi; \
    if [ -s /run/secrets/pip-index-url ]; then PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"; export PIP_INDEX_URL; fi; \
    mkdir -p /usr/local/libexec/imgbuild; \
    for cc in gcc g++; do \
        printf '%s\n' '#!/bin/sh' \
            '# imgbuild: compiles for the CPU baseline x86-64-v3, never for the build host (docs/cpu-baseline.md)' \
            'for a do shift; case "$a" in' \
            '    -march=native|-mcpu=native) set -- "$@" -march=x86-64-v3 ;;' \
            '    -mtune=native) set -- "$@" -mtune=generic ;;' \
            '    -D__AVX512__|-D__AVX256__|-D__SVE__|-D__NEON__|-D__SCALAR__) set -- "$@" -D__AVX256__ ;;' \
            '    *) set -- "$@" "$a" ;;' \
            'esac; done' \
            "exec $cc \"\$@\"" > /usr/local/libexec/imgbuild/$cc \
     && chmod 755 /usr/local/libexec/imgbuild/$cc; \
    done; \
    export CC=/usr/local/libexec/imgbuild/gcc CXX=/usr/local/libexec/imgbuild/g++ \
        CFLAGS='-march=x86-64-v3 -mtune=generic' CXXFLAGS='-march=x86-64-v3 -mtune=generic'; \
    export DS_BUILD_CPU_ADAM=1; \
    export DS_BUILD_FUSED_ADAM=1; \
    export DS_BUILD_AIO=1; \
    python -m pip install --progress-bar off --no-build-isolation deepspeed==0.19.5

# What records when, or in what order, this build ran leaves the layer: installer logs and the caches
# that hold times or inode numbers. Nothing a program reads at run time.
RUN rm -rf /var/log/apt/*.log /var/log/apt/eipp.log.xz /var/log/dpkg.log /var/log/alternatives.log \
        /var/cache/apt/*.bin /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old

LABEL io.imgbuild.layer="ds-0.19.5-hopper" \
      io.imgbuild.kind="deepspeed" \
      io.imgbuild.cuda-arch-list="9.0"